"""Read -> clean -> dedup -> held-out split, streaming into a document store.

Reading and the dedup index run here; cleaning and MinHash signatures (most of the CPU) run in
worker processes on batches of documents, results taken in order (pool.ordered_map), so the
store is identical for any number of workers. Every document that enters is counted: kept
(train or held out) or dropped under its reason, so in == kept + dropped always holds.
"""
import time
from collections import Counter
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Dict, Iterator, List, Optional, Union

import numpy as np

from pretrain.data.clean import Cleaner
from pretrain.data.dedup import Deduper, MinHasher
from pretrain.data.docstore import DocStoreWriter
from pretrain.data.hashing import dedup_words, is_validation, words_digest
from pretrain.data.pool import ordered_map
from pretrain.data.sources import Drop, Item, read_documents

_BATCH_CHARS = 1 << 20     # documents per worker task: about this much text (or 2048 documents)


def source_items(files: List[Path], builtin, text_field: str, max_chars: int,
                 scratch: Optional[Path] = None) -> Iterator[Item]:
    if builtin:
        from pretrain.data import sample
        yield from sample.documents(builtin)
    if files:
        yield from read_documents(files, text_field, max_chars, scratch)


@dataclass
class Cleaned:
    text: str
    reason: Optional[str]             # a clean filter that drops it, else None
    digest: bytes
    signature: Optional[np.ndarray]   # MinHash values (near dedup on)
    key: Optional[bytes]
    part: int


_worker: dict = {}


def _init(clean: dict, dedup: dict) -> None:
    _worker["clean"] = Cleaner(SimpleNamespace(**clean))
    _worker["hasher"] = MinHasher(dedup["num_perm"], dedup["shingle"]) if dedup["near"] else None


def clean_batch(items: List[Item]) -> List[Union[Drop, Cleaned]]:
    cleaner, hasher = _worker["clean"], _worker["hasher"]
    out: List[Union[Drop, Cleaned]] = []
    for item in items:
        if isinstance(item, Drop):
            out.append(item)
            continue
        text, reason = cleaner(item.text)
        if reason:
            out.append(Cleaned("", reason, b"", None, item.key, item.part))
            continue
        words = dedup_words(text)
        out.append(Cleaned(text, None, words_digest(words), hasher.signature(words) if hasher else None,
                           item.key, item.part))
    return out


def _batches(items: Iterator[Item]) -> Iterator[List[Item]]:
    batch: List[Item] = []
    chars = 0
    for item in items:
        batch.append(item)
        chars += len(item.text) if not isinstance(item, Drop) else 0
        if chars >= _BATCH_CHARS or len(batch) >= 2048:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


def ingest(items: Iterator[Item], out_dir: Path, clean_cfg: dict, dedup_cfg: dict, val_fraction: float,
           name: str, progress: bool, workers: int = 1) -> Dict:
    """Store the kept documents of `items` in out_dir; the counts for the manifest."""
    from tqdm import tqdm
    t0 = time.time()
    Cleaner(SimpleNamespace(**clean_cfg))           # a bad setting fails here, not inside a worker
    deduper = Deduper(SimpleNamespace(**dedup_cfg))
    dropped: Counter = Counter()
    seen = kept = held = chars = split_docs = extra_pieces = 0
    writer = DocStoreWriter(out_dir)
    bar = tqdm(desc=f"clean {name}", unit="doc", disable=None if progress else True, leave=False,
               mininterval=0.5)
    # closing: on any error the workers stop now, not when the traceback is freed
    cleaned = ordered_map(clean_batch, _batches(items), workers, _init, (clean_cfg, dedup_cfg))
    with closing(cleaned) as batches:
        for results in batches:
            bar.update(len(results))
            for r in results:
                if isinstance(r, Drop):
                    seen += r.count
                    dropped[r.reason] += r.count
                    continue
                seen += 1
                if r.part:
                    extra_pieces += 1
                    split_docs += r.part == 1
                reason = r.reason or deduper.check(r.digest, r.signature)
                if reason:
                    dropped[reason] += 1
                    continue
                val = is_validation(r.key or r.digest, val_fraction)
                writer.add(r.text, val)
                kept += 1
                held += val
                chars += len(r.text)
    writer.close()
    bar.close()
    return {"in": seen, "kept": kept, "train": kept - held, "val": held, "chars": chars,
            "dropped": dict(sorted(dropped.items())),
            "split_for_length": {"documents": split_docs, "extra_pieces": extra_pieces},
            "seconds": round(time.time() - t0, 3)}
