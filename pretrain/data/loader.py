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

MindRecord shards are read once through MindDataset and kept as .npy files beside them
(named by the shard's checksum), then memory-mapped. Cached .npy files are checked before they
are mapped (header, file size, row count, token total against the manifest); a damaged one is
rebuilt from its shard, with a warning line, and a shard is read only after its checksum matches.
"""
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

from pretrain.config.errors import PretrainDataError
from pretrain.config.layout import ParallelLayout
from pretrain.data.fsutil import save_npy_atomic
from pretrain.data.hashing import stable_int
from pretrain.data.mixture import MixtureSchedule
from pretrain.data.prepare import Prepared

SPLITS = ("train", "val")


class ShardRows:
    """One shard's rows: ids [N, capacity], segment lengths, tokens per row (memory-mapped)."""

    def __init__(self, path: Path, sha256: str, rows: int, capacity: int,
                 tokens: Optional[int] = None) -> None:
        if rows == 0:
            self.ids = np.zeros((0, capacity), np.int32)
            self.seg_lens, self.seg_off = np.zeros(0, np.int32), np.zeros(1, np.int64)
        else:
            self.ids, self.seg_lens, self.seg_off = _cached_read(path, sha256, rows, capacity, tokens)
        cum = np.concatenate([[0], np.cumsum(self.seg_lens, dtype=np.int64)])
        self.row_tokens = cum[self.seg_off[1:]] - cum[self.seg_off[:-1]]

    def row(self, i: int) -> Tuple[np.ndarray, np.ndarray]:
        return self.ids[i], self.seg_lens[self.seg_off[i]:self.seg_off[i + 1]]


def _cached_read(path: Path, sha256: str, rows: int, capacity: int, tokens: Optional[int]):
    stem = path.with_name(f"{path.name}.{sha256[:16]}")
    files = [Path(f"{stem}.{part}.npy") for part in ("ids", "seg_lens", "seg_off")]
    if all(f.exists() for f in files):
        why = _cache_problem(files, rows, capacity, tokens)
        if why is None:
            return tuple(np.load(f, mmap_mode="r") for f in files)
        print(f"warning: {why}; rebuilding the cached rows of {path.name} from the shard",
              file=sys.stderr, flush=True)
    _write_cache(path, sha256, files)
    why = _cache_problem(files, rows, capacity, tokens)
    if why is not None:
        raise PretrainDataError(f"{path}: {why}; the dataset in {path.parent} does not match its manifest: "
                                f"delete that directory and prepare again to rebuild it")
    return tuple(np.load(f, mmap_mode="r") for f in files)


def _write_cache(path: Path, sha256: str, files: List[Path]) -> None:
    from pretrain.data.hashing import file_sha256
    from pretrain.data.shards import read_shard
    try:
        same = file_sha256(path) == sha256       # read once per shard: the cost of the read itself
    except OSError as exc:
        raise PretrainDataError(f"{path}: cannot read it ({exc.strerror}); delete {path.parent} and prepare "
                                f"again to rebuild the dataset") from None
    if not same:
        raise PretrainDataError(f"{path}: its checksum differs from its manifest's (the file was changed "
                                f"or damaged); delete {path.parent} and prepare again to rebuild the dataset")
    for f, array in zip(files, read_shard(path)):
        save_npy_atomic(f, array)     # overwrites in place: a rank that mapped the old file keeps it


def _npy_problem(f: Path) -> Optional[str]:
    """Why a .npy file cannot be mapped (a header that does not parse, a size that is not the
    header plus the data), or None."""
    try:
        with open(f, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                np.lib.format.read_array_header_2_0
            shape, _, dtype = read(fh)
            want = fh.tell() + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        have = f.stat().st_size
    except (OSError, ValueError) as exc:
        return f"{f}: unreadable ({exc})"
    return None if have == want else f"{f}: {have} bytes, expected {want} (truncated or damaged)"


def _cache_problem(files: List[Path], rows: int, capacity: int, tokens: Optional[int]) -> Optional[str]:
    """Why the cached rows of a shard cannot be used, or None."""
    for f in files:
        why = _npy_problem(f)
        if why:
            return why
    ids, seg_lens, seg_off = (np.load(f, mmap_mode="r") for f in files)
    if ids.shape != (rows, capacity):
        return f"{files[0]}: holds {ids.shape} rows x tokens, the manifest says ({rows}, {capacity})"
    if seg_off.shape != (rows + 1,) or seg_off[0] != 0 or seg_off[-1] != len(seg_lens) or \
            (tokens is not None and int(np.sum(seg_lens, dtype=np.int64)) != tokens):
        return f"{files[1]}: document lengths do not add up to the manifest's {tokens} tokens in {rows} rows"
    return None


class _RankView:
    """The rows of one dataset and split, in the order they were packed (every rank draws from all
    of them: the module doc says which of them a rank trains)."""

    def __init__(self, prepared: Prepared, split: str) -> None:
        info = prepared.manifest[split]["shards"]
        capacity = prepared.seq_length + 1
        paths = prepared.train_shards if split == "train" else prepared.val_shards
        self.shards = [ShardRows(paths[s], info[s]["sha256"], info[s]["rows"], capacity,
                                 info[s].get("tokens")) for s in range(len(info))]
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
                 split: str = "train") -> None:
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
        self.views = [_RankView(prepared[n], split) for n in self.names]
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
