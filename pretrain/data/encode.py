"""Tokenize stage: sentencepiece in worker processes, one fixed-size chunk of documents each.

A worker reads its chunk straight from the document store (no text crosses a pipe), encodes it,
appends EOD to every document, separates held-out documents, and for best-fit packing already
packs its training documents, handing back only compact int32 arrays. Chunks are fixed by
size and results are consumed in chunk order (pool.ordered_map), so the output is identical for
any number of workers.
"""
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional, Sequence, Tuple

import numpy as np

from pretrain.data.docstore import DocStore
from pretrain.data.pack import Docs, Rows, pack_best_fit
from pretrain.data.pool import ordered_map


@dataclass
class Task:
    store: str
    start: int
    stop: int
    capacity: int
    method: str              # best_fit | concat | none (encode only: the raw-throughput baseline)
    eod_id: int
    pad_id: int
    max_room: Optional[int]  # best-fit rows with more free room are handed back for repacking


@dataclass
class Result:
    rows: Optional[Rows]     # packed training rows (best_fit), else None
    train: Docs              # training documents not yet in rows (concat: all of them)
    val: Docs                # held-out documents
    split: int               # training documents split for length while packing here
    tokens: int              # tokens produced, EOD included


_worker: dict = {}


def _init(model_path: str) -> None:
    import sentencepiece as spm
    _worker["sp"] = spm.SentencePieceProcessor(model_file=model_path)
    _worker["stores"] = {}


def encode_texts(sp, texts: Sequence[str], eod_id: int) -> Docs:
    """Documents as one int32 stream, each followed by EOD. One thread: data.workers processes are
    the parallelism (sentencepiece's own pool would otherwise run on every core in each of them)."""
    ids = sp.encode(list(texts), num_threads=1)
    lens = np.fromiter((len(x) for x in ids), np.int64, count=len(ids))
    flat = np.fromiter(itertools.chain.from_iterable(ids), np.int32, count=int(lens.sum()))
    tokens = np.insert(flat, np.cumsum(lens), eod_id).astype(np.int32)
    return Docs(tokens, (lens + 1).astype(np.int32))


def _select(docs: Docs, keep: np.ndarray) -> Docs:
    return Docs(docs.tokens[np.repeat(keep, docs.lens)], docs.lens[keep])


def run_task(task: Task) -> Result:
    stores = _worker["stores"]
    if task.store not in stores:         # stores are immutable once published: open each once
        stores[task.store] = DocStore(Path(task.store))
    store = stores[task.store]
    texts = store.texts(task.start, task.stop)
    if task.method == "none":           # the bare sentencepiece call, nothing else
        ids = _worker["sp"].encode(texts)
        return Result(None, Docs.empty(), Docs.empty(), 0, sum(map(len, ids)) + len(ids))
    docs = encode_texts(_worker["sp"], texts, task.eod_id)
    held = store.held_out[task.start:task.stop]
    train, val = _select(docs, ~held), _select(docs, held)
    if task.method == "best_fit":
        rows, rest, split = pack_best_fit(train, task.capacity, task.pad_id, task.max_room)
        return Result(rows, rest, val, split, docs.num_tokens)
    return Result(None, train, val, 0, docs.num_tokens)


def run_tasks(tasks: Sequence[Task], model_path: Path, workers: int) -> Iterator[Result]:
    """Results in task order, computed by `workers` processes (in-process when workers <= 1)."""
    return ordered_map(run_task, tasks, workers, _init, (str(model_path),))


def chunk_tasks(store: DocStore, capacity: int, method: str, eod_id: int, pad_id: int,
                max_room: Optional[int]) -> Tuple[Task, ...]:
    return tuple(Task(str(store.dir), a, b, capacity, method, eod_id, pad_id, max_room)
                 for a, b in store.chunks())
