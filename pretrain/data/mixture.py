"""Which dataset each sample slot draws from: weighted, deterministic, random-access.

Slots are numbered 0, 1, 2, ... per (split, dp rank). They are cut into blocks of BLOCK slots;
every block holds exactly round(w_i x BLOCK) slots of dataset i (largest remainder), in an order
shuffled by (seed, stream, block). So the draw for any slot, and how many samples of its dataset
came before it, follow from the slot number alone: no iterator state, and resuming at step k is
just asking for slot k x batch. Realised shares match the weights to within 1/BLOCK per block.
"""
from typing import Dict, Sequence, Tuple

import numpy as np

BLOCK = 1 << 14


def apportion(weights: Sequence[float], total: int) -> np.ndarray:
    """Integer counts summing to `total`, proportional to weights (largest remainder)."""
    w = np.asarray(weights, dtype=np.float64)
    exact = w / w.sum() * total
    counts = np.floor(exact).astype(np.int64)
    short = total - int(counts.sum())
    order = np.argsort(-(exact - counts), kind="stable")
    counts[order[:short]] += 1
    return counts


class MixtureSchedule:
    def __init__(self, weights: Sequence[float], seed: int, stream: Sequence[int],
                 block: int = BLOCK) -> None:
        self.block = block
        self.counts = apportion(weights, block)
        self._key = [int(seed) % (1 << 63), *stream]
        self._cache: Dict[int, Tuple[np.ndarray, np.ndarray]] = {}

    def _block(self, b: int) -> Tuple[np.ndarray, np.ndarray]:
        """(dataset of each slot, samples of that dataset earlier in the block)."""
        if b not in self._cache:
            rng = np.random.default_rng([*self._key, b])
            order = rng.permutation(np.repeat(np.arange(len(self.counts)), self.counts))
            within = np.empty(self.block, np.int64)
            for d in range(len(self.counts)):
                at = np.flatnonzero(order == d)
                within[at] = np.arange(at.size)
            if len(self._cache) >= 8:
                self._cache.pop(next(iter(self._cache)))
            self._cache[b] = (order, within)
        return self._cache[b]

    def draw(self, slots: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """For each slot: its dataset index and the dataset-local sample number (0, 1, ...)."""
        slots = np.asarray(slots, dtype=np.int64)
        blocks, pos = np.divmod(slots, self.block)
        dataset = np.empty(slots.shape, np.int64)
        sample = np.empty(slots.shape, np.int64)
        for b in np.unique(blocks).tolist():
            sel = blocks == b
            order, within = self._block(b)
            d = order[pos[sel]]
            dataset[sel] = d
            sample[sel] = b * self.counts[d] + within[pos[sel]]
        return dataset, sample
