"""What a BatchLoader's mix really gives: the share of real tokens each dataset contributed (the
pipeline's and the data-sample tests check it against the weights)."""
import numpy as np


def realised_shares(ld, steps):
    """Share of real (non-padding) tokens each dataset contributed to the loader's batches over
    `steps` (an int n means steps 0..n-1)."""
    steps = np.arange(steps) if isinstance(steps, (int, np.integer)) else np.fromiter(steps, np.int64)
    tokens = np.zeros(len(ld.names), np.float64)
    for d, _, rows in ld._draw(ld.slots(steps)):
        tokens[d] += ld.views[d].tokens[rows].sum()
    return {n: float(t / tokens.sum()) for n, t in zip(ld.names, tokens)}
