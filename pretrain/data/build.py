"""Tokenize -> pack -> shard for one source: the document store in, MindRecord shards out.

Workers pack most training rows themselves (best-fit within their chunk); rows they could only
fill loosely come back as documents and are packed again here together with other chunks'
leftovers, so the padding of the final dataset stays near zero. Held-out documents are packed
here too. Buffers are flushed every POOL_ROWS rows' worth of tokens: memory stays bounded.
"""
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from pretrain.data.docstore import DocStore
from pretrain.data.encode import chunk_tasks, run_tasks
from pretrain.data.pack import ConcatPacker, Docs, Rows, pack_best_fit
from pretrain.data.shards import ShardWriter

POOL_ROWS = 512           # leftover/held-out buffer, in rows, before it is packed and written
LOOSE_ROOM = 0.02         # a worker's row with more free room than this is repacked here


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


class _Sink:
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


def build_shards(name: str, store: DocStore, model_path: Path, tok: Dict, *, seq_length: int, method: str,
                 num_shards: int, workers: int, out_dir: Path, progress: bool) -> Dict[str, Dict]:
    """Write train and val shards into out_dir; per-split row/token/padding statistics."""
    from tqdm import tqdm
    capacity = seq_length + 1
    expected = int(store.ends[-1]) * 2 if len(store) else 0      # ~0.3 tokens/byte x 4 B + headroom
    train = _Sink(out_dir, "train", num_shards, capacity, tok["pad_id"], method, expected)
    val = _Sink(out_dir, "val", 1, capacity, tok["pad_id"], method, expected // 50)
    max_room = int(LOOSE_ROOM * capacity) if method == "best_fit" else None
    tasks = chunk_tasks(store, capacity, method, tok["eod_id"], tok["pad_id"], max_room)
    bar = tqdm(total=len(tasks), desc=f"tokenize {name}", unit="chunk",
               disable=None if progress else True, leave=False)
    with closing(run_tasks(tasks, model_path, workers)) as results:   # workers stop on any error
        for result in results:
            if result.rows is not None:
                train.rows(result.rows)
                train.stats.truncated += result.split
            train.docs(result.train)
            val.docs(result.val)
            bar.update(1)
    bar.close()
    return {"train": train.close(), "val": val.close()}
