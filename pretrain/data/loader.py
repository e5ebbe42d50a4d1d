"""BatchLoader: deterministic, mixture-weighted batches of packed rows for one dp rank.

batch(step) depends only on (seed, step, dp_rank, dp_size, the prepared data and the weights):
no iterator state, so a resumed run asks for batch(k) and gets what the uninterrupted run got.

Who reads what: the data order is one sequence of global sample slots, the same for every
data-parallel size. Global step k with a global batch of G = batch_size x dp_size rows is slots
k·G ... k·G + G - 1; dp rank r trains the contiguous slice r·batch_size ... of them. So the rows
of a global step are the same set whatever dp_size is, and a job that shrinks from dp 2 to dp 1
(or a dp2 run resumed with parallel=single) neither repeats nor skips a sample. Within a dataset,
sample number c is row perm_e[c mod R] of epoch e = c div R over all of its rows, perm_e a
permutation keyed by (seed, split, dataset, epoch). mixture.py decides which dataset each sample
slot draws from.

Layout of a batch (rows of seq_length + 1 tokens, see pack.py):
  input_ids = row[:-1], labels = row[1:]            int32 [B, S]
  segment_ids: 1, 2, ... per document piece, 0 on padding                  int32 [B, S]
  position_ids: restart at 0 at each document piece                         int32 [B, S]
  loss_mask: 1 where the label is the next token of the same document       float32 [B, S]
Labels stay valid token ids everywhere (padding -> pad_id); loss_mask is what excludes padding
and the step across a document boundary (EOD -> next document's first token), so a loss of
sum(ce(logits, labels) * loss_mask) / sum(loss_mask) is correct as is.

Rows come from each shard's row cache (pretrain.data.rowcache: memory-mapped .npy files beside
the shard, built from it once): no row reaches a batch before its bytes match the checksums written
with the cache and its token ids are below the vocabulary size; a damaged cache is rebuilt from the
verified shard, with a warning line, and the batch is what a clean cache gives.
"""
from typing import Dict, List, Optional, Tuple

import numpy as np

from pretrain.config.errors import PretrainDataError
from pretrain.config.layout import ParallelLayout
from pretrain.data.hashing import stable_int
from pretrain.data.mixture import MixtureSchedule
from pretrain.data.prepare import Prepared
from pretrain.data.rowcache import ShardRows

SPLITS = ("train", "val")


class _RankView:
    """The rows of one dataset and split, in the order they were packed (every rank draws from all
    of them: the module doc says which of them a rank trains)."""

    def __init__(self, prepared: Prepared, split: str, vocab_size: Optional[int]) -> None:
        info = prepared.manifest[split]["shards"]
        capacity = prepared.seq_length + 1
        paths = prepared.train_shards if split == "train" else prepared.val_shards
        vocab = prepared.manifest["tokenizer"]["vocab_size"] if vocab_size is None else vocab_size
        self.shards = [ShardRows(path, e["sha256"], e["rows"], capacity, e.get("tokens"),
                                 index_sha256=e.get("index_sha256"), vocab_size=vocab)
                       for path, e in zip(paths, info)]
        shard_of = np.concatenate([np.full(len(sh.ids), k, np.int64) for k, sh in enumerate(self.shards)])
        row_of = np.concatenate([np.arange(len(sh.ids), dtype=np.int64) for sh in self.shards])
        # one fixed order over every shard's rows (row r of each shard in turn): the same for every
        # data-parallel size, since every rank reads from all shards (data.num_shards does not follow dp)
        order = np.argsort(row_of * len(self.shards) + shard_of, kind="stable")
        self.shard_of, self.row_of = shard_of[order], row_of[order]
        self.tokens = np.concatenate([sh.row_tokens for sh in self.shards])[self._flat_index()]

    def _flat_index(self) -> np.ndarray:
        starts = np.concatenate([[0], np.cumsum([len(sh.ids) for sh in self.shards])[:-1]])
        return starts[self.shard_of] + self.row_of

    def __len__(self) -> int:
        return len(self.row_of)

    def row(self, i: int) -> Tuple[np.ndarray, np.ndarray]:
        return self.shards[self.shard_of[i]].row(int(self.row_of[i]))


def rows_to_batch(rows: List[Tuple[np.ndarray, np.ndarray]], seq_length: int) -> Dict[str, np.ndarray]:
    """A batch (layout in the module docstring) of packed rows, each (ids [seq_length + 1], the
    lengths of its document pieces)."""
    B, cap = len(rows), seq_length + 1
    ids = np.empty((B, cap), np.int32)
    seg = np.zeros((B, cap), np.int32)
    pos = np.zeros((B, cap), np.int32)
    for b, (row_ids, lens) in enumerate(rows):
        ids[b] = row_ids
        n = int(lens.sum())
        seg[b, :n] = np.repeat(np.arange(1, len(lens) + 1, dtype=np.int32), lens)
        pos[b, :n] = np.arange(n) - np.repeat(np.cumsum(lens) - lens, lens)
    same_doc = (seg[:, :-1] != 0) & (seg[:, 1:] == seg[:, :-1])
    return {"input_ids": ids[:, :-1].copy(), "labels": ids[:, 1:].copy(),
            "loss_mask": same_doc.astype(np.float32), "position_ids": pos[:, :-1].copy(),
            "segment_ids": seg[:, :-1].copy()}


class BatchLoader:
    def __init__(self, prepared: Dict[str, Prepared], weights: Dict[str, float], *, batch_size: int,
                 seq_length: int, seed: int, dp_rank: int = 0, dp_size: int = 1,
                 split: str = "train", vocab_size: Optional[int] = None) -> None:
        """vocab_size: the model's (model.vocab_size); every token id is checked to be below it before
        a batch holds it (None: each dataset's tokenizer's, from its manifest)."""
        if split not in SPLITS:
            raise PretrainDataError(f"split {split!r}: one of {', '.join(SPLITS)}")
        if not 0 <= dp_rank < dp_size or batch_size < 1:
            raise PretrainDataError(f"dp_rank={dp_rank}, dp_size={dp_size}, batch_size={batch_size}: need "
                                    f"0 <= dp_rank < dp_size and batch_size >= 1")
        unknown = sorted(set(weights) - set(prepared))
        if unknown:
            raise PretrainDataError(f"mix names {unknown} that are not prepared data sources "
                                    f"(data.sources has {sorted(prepared)})")
        if any(w < 0 for w in weights.values()) or sum(weights.values()) <= 0:
            raise PretrainDataError(f"mix weights {dict(weights)}: need >= 0 with a positive sum")
        self.names = sorted(n for n, w in weights.items() if w > 0)   # dict order must not matter
        self.batch_size, self.seq_length, self.seed, self.split = batch_size, seq_length, seed, split
        for n in self.names:
            if prepared[n].seq_length != seq_length:
                raise PretrainDataError(f"dataset {n!r} was packed for seq_length {prepared[n].seq_length}, "
                                        f"the model uses {seq_length} (prepare it with "
                                        f"data.seq_length={seq_length})")
        # global sample order (module doc): every rank draws from all rows with the keys of rank 0 of
        # 1, so a dp1 run samples exactly as before and a dp-n run splits the same global slots
        self.dp_rank, self.dp_size = dp_rank, dp_size
        self.views = [_RankView(prepared[n], split, vocab_size) for n in self.names]
        for n, v in zip(self.names, self.views):
            if not len(v):
                hint = " or data.val_fraction too small" if split == "val" else ""
                raise PretrainDataError(f"dataset {n!r} has no {split} rows (too little data{hint})")
        split_tag = SPLITS.index(split)
        self.schedule = MixtureSchedule([weights[n] for n in self.names], seed, [0, split_tag])
        self._perm_key = [int(seed) % (1 << 63), 0, split_tag]
        self._perms: Dict[Tuple[int, int], np.ndarray] = {}

    def _rows(self, d: int, samples: np.ndarray) -> np.ndarray:
        """Row indices (into the rank's view of dataset d) of dataset-local sample numbers."""
        n = len(self.views[d])
        epochs, pos = np.divmod(samples, n)
        out = np.empty(samples.shape, np.int64)
        for e in np.unique(epochs).tolist():
            sel = epochs == e
            out[sel] = self._perm(d, e)[pos[sel]]
        return out

    def _perm(self, d: int, epoch: int) -> np.ndarray:
        if (d, epoch) not in self._perms:
            if len(self._perms) >= 4 * len(self.views):
                self._perms.pop(next(iter(self._perms)))
            rng = np.random.default_rng([*self._perm_key, stable_int(self.names[d]), epoch])
            self._perms[(d, epoch)] = rng.permutation(len(self.views[d]))
        return self._perms[(d, epoch)]

    def _draw(self, slots: np.ndarray) -> List[Tuple[int, np.ndarray, np.ndarray]]:
        dataset, sample = self.schedule.draw(slots)
        return [(d, np.flatnonzero(dataset == d), self._rows(d, sample[dataset == d]))
                for d in np.unique(dataset).tolist()]

    def batch(self, step: int) -> Dict[str, np.ndarray]:
        if step < 0:
            raise PretrainDataError(f"step {step}: must be >= 0")
        B = self.batch_size
        rows: List[Tuple[np.ndarray, np.ndarray]] = [None] * B  # type: ignore[list-item]
        for d, where, drawn in self._draw(self.slots(np.array([step]))):
            for b, r in zip(where.tolist(), drawn.tolist()):
                rows[b] = self.views[d].row(r)
        return rows_to_batch(rows, self.seq_length)

    def slots(self, steps: np.ndarray) -> np.ndarray:
        """The global sample slots this rank trains at `steps`, in order: the layout's rule."""
        return ParallelLayout.sample_slots(self.dp_rank, self.dp_size, steps, self.batch_size)
