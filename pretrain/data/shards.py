"""Shard stage: packed rows -> MindRecord files that mindspore.dataset.MindDataset reads.

One file per data-parallel reader (`<split>-00000-of-00002.mindrecord` + its `.db` index);
rows go round-robin, so shards differ by at most one row. Each row has two int32 columns:
`input_ids` (seq_length + 1 tokens) and `seg_lens` (its document pieces' lengths, see pack.py).
Files are written inside the dataset's temp directory, which is renamed into place only when
every shard is committed and the manifest written (pretrain.data.fsutil.publish_dir).

SplitSink is one writer task's side of a split: the tokenize tasks' packed rows written as they come,
their loose documents packed again (best fit) or chunked (concat), and the split's counts.

Writing never imports mindspore (pretrain.data.mindrecord_file loads its C++ writer alone);
reading a shard back (read_shard) does, lazily.
"""
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

from pretrain.data.hashing import file_sha256
from pretrain.data.mindrecord_file import CoreFile
from pretrain.data.pack import ConcatPacker, Docs, Rows, pack_best_fit

# lazy imports (mindspore): by design (3-10 s); data workers do not import it

SCHEMA = {"input_ids": {"type": "int32", "shape": [-1]}, "seg_lens": {"type": "int32", "shape": [-1]}}
COLUMNS = list(SCHEMA)
DESCRIPTION = "packed token rows: input_ids[seq_length+1], seg_lens[documents in row]"
HEADER_BYTES = 1 << 20
_BUFFER_BYTES = 64 << 20     # rows buffered across all shards before writing: bounded whatever num_shards
POOL_ROWS = 512              # a SplitSink's loose documents, in rows, before they are packed and written


def shard_name(split: str, index: int, count: int) -> str:
    return f"{split}-{index:05d}-of-{count:05d}.mindrecord"


def page_size(expected_bytes: int) -> int:
    """MindRecord pre-sizes pages (default 32 MB, sparse on disk, but checksummed in full): size
    them to the expected shard, 1 to 16 MB, keeping the page count (and so the header) small."""
    size = 1 << 20
    while size < expected_bytes // 128 and size < 1 << 24:
        size <<= 1
    return size


class _PublicFile:
    """The same file through mindspore.mindrecord.FileWriter, row dicts and all."""

    def __init__(self, path: Path, schema: Dict[str, Dict], desc: str, header_size: int,
                 page_size: int) -> None:
        from mindspore.mindrecord import FileWriter
        self._w = FileWriter(str(path), shard_num=1, overwrite=True)
        self._w.set_header_size(header_size)
        self._w.set_page_size(page_size)
        self._w.add_schema(schema, desc)
        self._fields = list(schema)

    def write(self, rows: List[Tuple[np.ndarray, ...]]) -> None:
        self._w.write_raw_data([dict(zip(self._fields, r)) for r in rows])

    def commit(self) -> None:
        self._w.commit()


class ShardWriter:
    fast = True      # MindSpore's C++ writer without importing mindspore (mindrecord_file); False:
                     # FileWriter, the public API, for every row (tests compare the two byte for byte)

    def __init__(self, directory: Path, split: str, num_shards: int, capacity: int,
                 expected_bytes: int = 0, index: Optional[int] = None) -> None:
        """index: write only that one of the num_shards shards (one writer task per shard)."""
        self.paths = [Path(directory) / shard_name(split, i, num_shards)
                      for i in (range(num_shards) if index is None else [index])]
        page = page_size(expected_bytes // len(self.paths))
        self._writers = [(CoreFile if self.fast else _PublicFile)(p, SCHEMA, DESCRIPTION, HEADER_BYTES, page)
                         for p in self.paths]
        count = len(self.paths)
        self._batch_rows = max(1, min(1024, _BUFFER_BYTES // (count * capacity * 4)))
        self._buffers: List[list] = [[] for _ in self.paths]
        self.rows = [0] * count
        self.tokens = [0] * count
        self._next = 0

    def write(self, rows: Rows) -> None:
        n = len(self.paths)
        ends = np.cumsum(rows.seg_counts)
        starts = ends - rows.seg_counts
        shard_of = (self._next + np.arange(len(rows))) % n
        self._next += len(rows)
        row_tokens = np.add.reduceat(rows.seg_lens, starts) if len(rows) else np.zeros(0, np.int64)
        for s in range(n):
            self.rows[s] += int(np.count_nonzero(shard_of == s))
            self.tokens[s] += int(row_tokens[shard_of == s].sum())
        for i, (s, a, b) in enumerate(zip(shard_of.tolist(), starts.tolist(), ends.tolist())):
            self._buffers[s].append((rows.ids[i], rows.seg_lens[a:b]))
            if len(self._buffers[s]) >= self._batch_rows:
                self._flush(s)

    def _flush(self, s: int) -> None:
        rows, self._buffers[s] = self._buffers[s], []
        self._writers[s].write(rows)

    def close(self) -> List[Dict]:
        """Commit every shard; their manifest entries (name, rows, tokens, checksums)."""
        out = []
        for s, (w, p) in enumerate(zip(self._writers, self.paths)):
            if self._buffers[s]:
                self._flush(s)
            w.commit()
            index = Path(f"{p}.db")
            out.append({"file": p.name, "rows": self.rows[s], "tokens": self.tokens[s],
                        "bytes": p.stat().st_size, "sha256": file_sha256(p),
                        "index_bytes": index.stat().st_size, "index_sha256": file_sha256(index)})
        return out


@dataclass
class SplitStats:
    rows: int = 0
    tokens: int = 0          # real tokens (documents incl. EOD), padding excluded
    truncated: int = 0       # documents split across rows
    shards: List[Dict] = field(default_factory=list)

    def summary(self, capacity: int) -> Dict:
        slots = self.rows * capacity
        return {"rows": self.rows, "tokens": self.tokens, "padding_tokens": slots - self.tokens,
                "padding_fraction": round((slots - self.tokens) / slots, 6) if slots else 0.0,
                "truncated_documents": self.truncated, "shards": self.shards}


class SplitSink:
    """Rows of one split: pack buffered documents, write rows, count."""

    def __init__(self, out_dir: Path, split: str, num_shards: int, capacity: int, pad_id: int,
                 method: str, expected_bytes: int, index: Optional[int] = None) -> None:
        self.capacity, self.pad_id, self.method = capacity, pad_id, method
        self.writer = ShardWriter(out_dir, split, num_shards, capacity, expected_bytes, index)
        self.stats = SplitStats()
        self.concat = ConcatPacker(capacity, pad_id) if method == "concat" else None
        self._pool: List[Docs] = []
        self._pooled = 0

    def rows(self, rows: Rows) -> None:
        if len(rows):
            self.writer.write(rows)
            self.stats.rows += len(rows)
            self.stats.tokens += rows.num_tokens

    def docs(self, docs: Docs) -> None:
        if not len(docs.lens):
            return
        if self.concat:
            self.rows(self.concat.add(docs))
            return
        self._pool.append(docs)
        self._pooled += docs.num_tokens
        if self._pooled >= POOL_ROWS * self.capacity:
            self._pack_pool()

    def _pack_pool(self) -> None:
        rows, _, split = pack_best_fit(Docs.join(self._pool), self.capacity, self.pad_id)
        self.stats.truncated += split
        self.rows(rows)
        self._pool, self._pooled = [], 0

    def close(self) -> Dict:
        if self.concat:
            self.rows(self.concat.flush())
            self.stats.truncated += self.concat.truncated
        elif self._pool:
            self._pack_pool()
        self.stats.shards = self.writer.close()
        return self.stats.summary(self.capacity)


def read_shard(path: Path) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All rows of one shard through MindDataset, in file order: ids [N, capacity],
    seg_lens (flat) and seg_offsets [N + 1] into it."""
    import mindspore.dataset as ds
    data = ds.MindDataset(str(path), columns_list=COLUMNS, shuffle=False, num_parallel_workers=1)
    ids, segs = [], []
    for row_ids, row_segs in data.create_tuple_iterator(output_numpy=True, num_epochs=1):
        ids.append(row_ids)
        segs.append(row_segs)
    if not ids:
        return np.zeros((0, 0), np.int32), np.zeros(0, np.int32), np.zeros(1, np.int64)
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in segs])]).astype(np.int64)
    return np.stack(ids).astype(np.int32), np.concatenate(segs).astype(np.int32), offsets
