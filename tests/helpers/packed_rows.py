"""Loader batches of packed documents built by hand (lengths chosen by the test), for the model-input
tests of each document-attention mode."""
import numpy as np

from pretrain.data.loader import rows_to_batch

SEQ, EOD = 16, 2


def packed(*rows):
    """Rows of documents (lists of lengths), each document ending with EOD, the rest padding (0)."""
    out = []
    rng = np.random.default_rng(0)
    for lens in rows:
        ids = np.zeros(SEQ + 1, np.int32)
        at = 0
        for n in lens:
            ids[at: at + n - 1] = rng.integers(4, 100, n - 1)
            ids[at + n - 1] = EOD
            at += n
        out.append((ids, np.array(lens, np.int32)))
    return rows_to_batch(out, SEQ)
