"""The data stages as tasks over partitions: the one algorithm both engines (engine.py) run.

Clean store of a source (documents in, deduplicated documents out):
  read/<split>      one task per input split (consecutive small files up to a split's size, a
                    large file, or a 16 MB byte range of a large .jsonl; a builtin source is
                    one split): read ->
                    clean -> exact hash + MinHash LSH band keys; writes the surviving candidates
                    and their hashes, sorted by partition (partitions(): more as the input grows),
                    one set of files per task with each partition's offsets
  exact/<p>         exact dedup of hash partition p: of equal hashes the lowest global id stays
  near/<q>          the LSH band buckets of partition q (by key) over the exact survivors: documents
                    sharing a bucket are candidate pairs (edges from the bucket's lowest id)
  components/0      connected components of the candidate pairs; each keeps its lowest id
  final/<split>     the split's kept documents (byte copies), with the held-out flag
A document's global id is (split, index in split), so "lowest id" is "first in input order".
The held-out split is decided by a hash of the document (hashing.is_validation), per document.

Dataset of a source (clean store + tokenizer in, MindRecord shards out):
  tokenize/<chunk>  sentencepiece over a fixed-size chunk of the store; every training document
                    goes to output shard hash(text) % num_shards; best-fit packing within each
                    shard's part of the chunk (loose rows handed on as documents)
  shards/train-<i>  one writer per train shard: the chunks' rows in chunk order, the handed-on
                    documents packed again, a committed MindRecord file (in a fresh process on Ray);
                    the first also writes the val shard the same way

Every task writes into a temp directory and publishes it atomically with a completion record
(done.json) inside: a re-run after a crash, an interrupt or a lost node skips published tasks
and redoes only the rest. Task outputs depend on nothing but the task, so any engine, worker
count or retry gives the same bytes. The work directories live under <cache>/work/ and are
removed once the stage's result is published.
"""
import json
import os
import shutil
import sys
import threading
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from pretrain.data.charsets import Decoding, Undecodable, summary
from pretrain.data.clean import Cleaner
from pretrain.data.dedup import MinHasher, band_keys, check_settings, lsh_params
from pretrain.data.docstore import DocStore, DocStoreWriter
from pretrain.data.encode import WordCache, _select, encode_texts
from pretrain.data.fsutil import building, sweep_stale, write_json_atomic
from pretrain.data.hashing import dedup_view, is_validation, joined_words, stable_int, words_digest
from pretrain.data.pack import Docs, Rows, pack_best_fit
from pretrain.data.shards import SplitSink, SplitStats
from pretrain.data.sources import Drop, file_kind, read_jsonl_range, source_items, splittable

# lazy imports (tqdm, sentencepiece, pretrain.data.fasthash): on every import of the data package tqdm
# +~50-120 ms, sentencepiece +~20-130 ms, the compiled hashes +~0.4 s (numba); loaded by the stages that use them

DONE = "done.json"
EXACT_PARTS = 8            # partitions of a corpus up to PART_BYTES (the layout depends on the input
BAND_PARTS = 8             # size only, never on the engine or the workers, so a restart elsewhere reuses it)
PART_BYTES = 1 << 30       # ... and twice as many for each doubling beyond: a partition task's memory
                           # stays bounded as the corpus grows, and a large one has tasks for a cluster
LOOSE_ROOM = 0.02          # a tokenize task's best-fit row with more free room is repacked by its writer
SHARD_WARN_BYTES = 2 << 30  # text per output shard beyond which a warning names data.num_shards: MindRecord's
                            # commit (its index build) holds ~1.3x the shard in memory (+219 MB for 165 MB)
SPLIT_BYTES = 16 << 20     # an uncompressed .jsonl file larger than this is read as several splits
MIN_SPLIT_BYTES = 1 << 20  # ... and in a small corpus, one of more than this, so that there are
READ_TASKS = 16            # about this many read tasks to balance over the workers (the layout
                           # depends on the input files only, never on the engine or worker count)
GROUP_FILES = 1024         # files of one read task at most (its progress shows per task)
COMPILED_MIN_BYTES = 2 << 20    # input per worker from which the read tasks use the compiled dedup
                                # kernels (fasthash; the same values, so the choice never shows in the
                                # output): loading them in each worker (~0.6 CPU-s, ~150 MB) is repaid
                                # with near dedup on by ~0.26 CPU-s per MB of English prose, 0.3 of
                                # Chinese-English pages, 0.45-1.2 of Chinese (measured on 0.8 MB); with
                                # it off by ~0.013 (only the words: 32x as much input)
BATCH_DOCS = 512           # a read task hashes its kept documents in batches of this many (or of
BATCH_CHARS = 1 << 20      # this many characters): one compiled call per batch, not per document

# stage -> (tasks run, tasks reused) of the latest stage run in this process (for tests and logs)
counts: Dict[str, tuple] = {}
# stage -> what its tasks cost, summed over the stage runs of this process since the caller last
# cleared it (the benchmark): tasks run, their CPU seconds, the stage's wall seconds (of a streamed
# stage, only what it ran on after the stage beside it), and the bytes
# they wrote into partition files that tasks of a later stage read from many tasks at once (the
# shuffle: hash and band partitions, drop lists, candidate pairs, token chunks by output shard), the
# largest peak resident MB of a task's process and the most a task raised it above its start
profile: Dict[str, Dict[str, float]] = {}
WORK_LAYOUT = 3   # in the name of a clean store's work directory: bumped when task outputs change form, so
                  # a rerun never reuses an interrupted run's task outputs of another form (2: one file set
                  # per read task, partitions by input size; 3: band keys by FNV-1a + splitmix64)
SHUFFLED = ("exact-*.npy", "band-*.npy", "drop.npy", "edges.npy", "train-*.npz", "val-*.npz")


# ---------------------------------------------------------------- running and committing tasks

def _commit(out: str, stage: str, work: Callable[[Path], Dict]) -> Dict:
    """Run `work` into a temp directory and publish it as `out` with its completion record."""
    final = Path(out)
    if (final / DONE).is_file():          # done already (a retried task whose first try finished)
        return json.loads((final / DONE).read_text())
    with building(final) as tmp:
        rss0 = _reset_peak_rss()
        cpu = time.process_time()
        record = work(tmp)
        record["cpu_s"] = round(time.process_time() - cpu, 4)     # this task's own cost (profile)
        record["rss_mb"] = [round(rss0, 1), round(_peak_rss(), 1)]  # at its start, its peak (profile)
        record["shuffle_bytes"] = sum(f.stat().st_size for g in SHUFFLED for f in tmp.glob(g))
        write_json_atomic(tmp / DONE, record)
    return record


def _reset_peak_rss() -> float:
    """This process's resident MB now, with its peak reset to it (Linux's clear_refs "5"), so the
    peak read after a task is that task's own, not the worker's since it started; 0 elsewhere."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return _status_mb("VmRSS")
    except OSError:
        return 0.0


def _peak_rss() -> float:
    try:
        return _status_mb("VmHWM")
    except OSError:
        return 0.0


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def run_stage(engine, stage: str, stage_dir: Path, fn: Callable, tasks: Sequence) -> List[Dict]:
    """Run the tasks not yet published under stage_dir; every task's completion record, in order.
    A progress bar (tasks) shows on a terminal when `progress` (set by the caller) is on, for a
    stage run by the main thread (a writer streaming beside another stage shows none)."""
    from tqdm import tqdm
    stage_dir.mkdir(parents=True, exist_ok=True)
    sweep_stale(stage_dir)
    todo = [t for t in tasks if not (Path(t.out) / DONE).is_file()]
    t0 = time.perf_counter()
    bar = tqdm(total=len(tasks), initial=len(tasks) - len(todo), desc=f"{stage} {stage_dir.parent.name[:24]}",
               unit="task", leave=False, mininterval=0.5,
               disable=None if progress.on and threading.current_thread() is threading.main_thread() else True)
    try:
        for _ in engine.map(fn, todo):
            bar.update(1)
        bar.close()
    except BaseException:
        # Workers stopped mid-task (terminated, not unwound) leave their temp dirs: gone now.
        sweep_stale(stage_dir)
        raise
    counts[stage] = (len(todo), len(tasks) - len(todo))
    records = [json.loads((Path(t.out) / DONE).read_text()) for t in tasks]
    ran = {t.out for t in todo}
    cost = _cost(stage)
    cost["wall_s"] += time.perf_counter() - t0
    for t, r in zip(tasks, records):
        if t.out in ran:
            cost["tasks"] += 1
            cost["cpu_s"] += r.get("cpu_s", 0.0)
            cost["shuffle_bytes"] += r.get("shuffle_bytes", 0)
            start, peak = r.get("rss_mb", (0.0, 0.0))
            cost["peak_rss_mb"] = max(cost["peak_rss_mb"], peak)
            cost["task_rss_mb"] = max(cost["task_rss_mb"], peak - start)     # what the task added
    return records


def _cost(stage: str) -> Dict[str, float]:
    keys = ("tasks", "cpu_s", "wall_s", "shuffle_bytes", "peak_rss_mb", "task_rss_mb")
    return profile.setdefault(stage, dict.fromkeys(keys, 0))


def sweep_work(work_root: Path) -> None:
    """Temp dirs of dead task processes in every stage dir under <cache>/work."""
    if work_root.is_dir():
        sweep_stale(*(stage for build in work_root.iterdir() if build.is_dir() for stage in build.iterdir()))


progress = SimpleNamespace(on=False)    # prepare(progress=...) sets it for the bars of run_stage
_cache: Dict = {}


def forget() -> None:
    _cache.clear()


def _cached(key, make: Callable):
    """Per-process objects that are costly to build (cleaner, MinHash permutations, tokenizer)."""
    if key not in _cache:
        _cache[key] = make()
    return _cache[key]


def _gid(split: int, index: np.ndarray) -> np.ndarray:
    return (np.int64(split) << np.int64(32)) | index.astype(np.int64)


def _drops(stage_dir: Path, parts: int) -> np.ndarray:
    found = [np.load(stage_dir / str(p) / "drop.npy") for p in range(parts)
             if (stage_dir / str(p) / "drop.npy").is_file()]
    return np.unique(np.concatenate(found)) if found else np.zeros(0, np.int64)


# ---------------------------------------------------------------- clean store

@dataclass
class ReadTask:
    out: str
    split: int
    files: List[str]
    builtin: Optional[str]
    text_field: str
    clean: dict
    dedup: dict
    val_fraction: float
    byte_range: Optional[tuple] = None     # (start, stop) of the one .jsonl file: lines starting there
    lsh: Optional[dict] = None             # near dedup on: dedup.lsh_params (shape, permutations)
    parts: int = EXACT_PARTS               # hash partitions of the exact and the near stage
    compiled: bool = False                 # words and MinHash by fasthash's kernels (same values)
    source: str = ""                       # the source's name and encoding (pretrain.data.charsets)
    encoding: Optional[str] = None


def read_split(t: ReadTask) -> Dict:
    return _commit(t.out, "read", lambda tmp: _read_split(t, tmp))


def _read_split(t: ReadTask, tmp: Path) -> Dict:
    clean, dedup = t.clean, t.dedup
    cleaner = _cached(("clean", json.dumps(clean, sort_keys=True)), lambda: Cleaner(SimpleNamespace(**clean)))
    near = dedup["near"]
    hasher = _cached(("minhash", dedup["num_perm"], dedup["shingle"]),
                     lambda: MinHasher(dedup["num_perm"], dedup["shingle"], (t.lsh["a"], t.lsh["b"]))) \
        if near else None
    bands, width = (t.lsh["bands"], t.lsh["width"]) if near else (0, 0)
    held_out = t.val_fraction > 0
    earlier = set()               # digests of this split: a repeat is an exact duplicate (dedup.exact)
    signed: List[int] = []        # documents with a signature (an exact duplicate's is never used)
    writer = DocStoreWriter(tmp)
    digests = bytearray()
    chars: List[int] = []
    signatures: List[np.ndarray] = []   # MinHash of the signed documents, a batch's rows at a time
    dropped: Counter = Counter()
    undecodable = Undecodable()
    seen = split_docs = extra = 0
    texts: List[str] = []         # the kept documents of the batch not yet hashed and stored, and
    keys: List[bytes] = []        # their own held-out keys (b"" for none)
    batch_chars = 0

    def flush() -> None:
        """Hash and store the batch's documents, in order. The words digest is the exact-dedup
        identity and the held-out key of a document without one of its own: skipped when neither
        needs it (dedup off, no held-out split). Only the MinHash reads each word's place in them
        (Words); the digest, their bytes alone (by the compiled scan when it is on)."""
        views = _views(texts, t.compiled) if near or t.compiled else None
        sign: List = []
        for i, (text, key) in enumerate(zip(texts, keys)):
            if near or dedup["exact"] or (held_out and not key):
                digest = words_digest(views[i].joined if views is not None else joined_words(text))
            else:
                digest = bytes(16)
            writer.add(text, is_validation(key or digest, t.val_fraction))
            digests.extend(digest)
            chars.append(len(text))
            # An exact duplicate of an earlier document of this split is dropped by the exact stage,
            # before the near stage reads any band key: its signature is not computed.
            if near and not (dedup["exact"] and digest in earlier):
                signed.append(len(chars) - 1)
                sign.append(views[i])
            if dedup["exact"]:
                earlier.add(digest)
        if sign:
            signatures.append(hasher.signatures_of(sign, t.compiled))
        texts.clear()
        keys.clear()

    decoding = Decoding(t.source, t.encoding)
    if t.byte_range:
        items = read_jsonl_range(Path(t.files[0]), *t.byte_range, t.text_field, clean["max_chars"], decoding)
    else:
        items = source_items([Path(f) for f in t.files], t.builtin, t.text_field, clean["max_chars"],
                             scratch=tmp, decoding=decoding)
    for item in items:
        if isinstance(item, Drop):
            seen += item.count
            dropped[item.reason] += item.count
            if item.where:
                undecodable.add(item.where, item.reason)
            continue
        seen += 1
        if item.part:
            extra += 1
            split_docs += item.part == 1
        text, reason = cleaner(item.text)
        if reason:
            dropped[reason] += 1
            continue
        texts.append(text)
        keys.append(item.key or b"")
        batch_chars += len(text)
        if len(texts) == BATCH_DOCS or batch_chars >= BATCH_CHARS:
            flush()
            batch_chars = 0
    if texts:
        flush()
    writer.close()
    n = len(digests) // 16
    index = np.arange(n, dtype=np.int64)
    np.save(tmp / "chars.npy", np.asarray(chars, np.int64))
    if dedup["exact"] and n:
        d = np.frombuffer(bytes(digests), np.uint8).reshape(n, 16)
        _save_parts(tmp, "exact", d[:, :8].copy().view("<u8")[:, 0] % np.uint64(t.parts), t.parts,
                    index=index, digest=d)
    if near and n:
        m, index = len(signed), np.asarray(signed, np.int64)
        signed_sigs = np.concatenate(signatures) if signatures else np.zeros((0, bands * width), np.uint32)
        key = band_keys(signed_sigs, bands, width).reshape(-1)   # document-major: m x bands
        _save_parts(tmp, "band", key % np.uint64(t.parts), t.parts, index=np.repeat(index, bands),
                    band=np.tile(np.arange(bands, dtype=np.int16), m), key=key)
    return {"in": seen, "candidates": n, "dropped": dict(dropped), "undecodable": undecodable.record(),
            "split_for_length": {"documents": split_docs, "extra_pieces": extra}}


def _views(texts: List[str], compiled: bool) -> list:
    """The hashing.Words of each text: by one call of fasthash's kernel for the batch, or in Python."""
    if not compiled:
        return [dedup_view(x) for x in texts]
    from pretrain.data.fasthash import views_of
    return views_of([x.encode() for x in texts], texts)


def partitions(input_bytes: int) -> int:
    """Hash partitions of the exact and near stages: 8 up to PART_BYTES of input, doubling with it."""
    n = EXACT_PARTS
    while n * PART_BYTES < input_bytes:
        n *= 2
    return n


def _save_parts(tmp: Path, name: str, part: np.ndarray, parts: int, **columns: np.ndarray) -> None:
    """Columns sorted by partition, one .npy each, and the partitions' offsets: a partition task
    reads only its slice (memory-mapped), and a read task writes a fixed number of files however
    many partitions there are."""
    order = np.argsort(part, kind="stable")
    for col, values in columns.items():
        np.save(tmp / f"{name}-{col}.npy", values[order])
    np.save(tmp / f"{name}-offsets.npy", np.searchsorted(part[order], np.arange(parts + 1, dtype=np.uint64)))


def _load_part(read_dir: str, name: str, part: int, *columns: str) -> Optional[List[np.ndarray]]:
    """Partition `part` of a read task's columns, or None when it has none."""
    d = Path(read_dir)
    if not (d / f"{name}-offsets.npy").is_file():
        return None
    offsets = np.load(d / f"{name}-offsets.npy")
    a, b = int(offsets[part]), int(offsets[part + 1])
    if a == b:
        return None
    return [np.array(np.load(d / f"{name}-{c}.npy", mmap_mode="r")[a:b]) for c in columns]


@dataclass
class PartTask:
    out: str
    part: int
    read_dirs: List[str]
    exact_dir: str = ""
    parts: int = EXACT_PARTS


def exact_part(t: PartTask) -> Dict:
    return _commit(t.out, "exact", lambda tmp: _exact_part(t, tmp))


def _exact_part(t: PartTask, tmp: Path) -> Dict:
    gids, digests = [np.zeros(0, np.int64)], [np.zeros((0, 16), np.uint8)]
    for split, d in enumerate(t.read_dirs):
        got = _load_part(d, "exact", t.part, "index", "digest")
        if got is not None:
            gids.append(_gid(split, got[0]))
            digests.append(got[1])
    gid, dig = np.concatenate(gids), np.concatenate(digests)
    halves = dig.view(np.uint64).reshape(-1, 2) if len(dig) else np.zeros((0, 2), np.uint64)
    order = np.lexsort((gid, halves[:, 1], halves[:, 0]))
    h = halves[order]
    first = np.ones(len(order), bool)
    first[1:] = (h[1:] != h[:-1]).any(axis=1)
    drop = np.sort(gid[order][~first])
    np.save(tmp / "drop.npy", drop)
    return {"dropped": int(len(drop))}


def near_part(t: PartTask) -> Dict:
    return _commit(t.out, "near", lambda tmp: _near_part(t, tmp))


def _near_part(t: PartTask, tmp: Path) -> Dict:
    exact = _drops(Path(t.exact_dir), t.parts)
    gids, bands, keys = [np.zeros(0, np.int64)], [np.zeros(0, np.int16)], [np.zeros(0, np.uint64)]
    for split, d in enumerate(t.read_dirs):
        got = _load_part(d, "band", t.part, "index", "band", "key")
        if got is not None:
            g = _gid(split, got[0])
            keep = ~np.isin(g, exact)
            gids.append(g[keep])
            bands.append(got[1][keep])
            keys.append(got[2][keep])
    gid, band, key = np.concatenate(gids), np.concatenate(bands), np.concatenate(keys)
    order = np.lexsort((gid, key, band))
    gid, band, key = gid[order], band[order], key[order]
    start = np.ones(len(gid), bool)
    start[1:] = (band[1:] != band[:-1]) | (key[1:] != key[:-1])
    head = gid[np.maximum.accumulate(np.where(start, np.arange(len(gid)), 0))] if len(gid) else gid
    edges = np.stack([head[~start], gid[~start]], axis=1) if len(gid) else np.zeros((0, 2), np.int64)
    edges = np.unique(edges, axis=0) if len(edges) else edges.reshape(0, 2)
    np.save(tmp / "edges.npy", edges.astype(np.int64))
    return {"edges": int(len(edges))}


@dataclass
class ComponentsTask:
    out: str
    near_dir: str
    parts: int = BAND_PARTS


def components(t: ComponentsTask) -> Dict:
    return _commit(t.out, "components", lambda tmp: _components(t, tmp))


def _components(t: ComponentsTask, tmp: Path) -> Dict:
    """Union-find over the candidate pairs (duplicates only: small next to the corpus); every
    component keeps its lowest id, the rest are near duplicates."""
    parts = [np.load(Path(t.near_dir) / str(q) / "edges.npy") for q in range(t.parts)
             if (Path(t.near_dir) / str(q) / "edges.npy").is_file()]
    edges = np.unique(np.concatenate(parts), axis=0) if parts else np.zeros((0, 2), np.int64)
    parent: Dict[int, int] = {}

    def root(x: int) -> int:
        while parent.get(x, x) != x:
            parent[x] = parent.get(parent[x], parent[x])
            x = parent[x]
        return x

    for a, b in edges.tolist():
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    drop = np.asarray(sorted(x for x in parent if root(x) != x), np.int64)
    np.save(tmp / "drop.npy", drop)
    return {"dropped": int(len(drop)), "edges": int(len(edges))}


@dataclass
class FinalTask:
    out: str
    split: int
    read_dir: str
    exact_dir: str
    near_dir: str
    parts: int = EXACT_PARTS


def final_split(t: FinalTask) -> Dict:
    return _commit(t.out, "final", lambda tmp: _final_split(t, tmp))


def _final_split(t: FinalTask, tmp: Path) -> Dict:
    """The split's kept documents, copied as bytes (no decoding) from its candidates."""
    src = Path(t.read_dir)
    ends = np.fromfile(src / "docs.end", np.int64)
    held = np.fromfile(src / "docs.val", np.uint8)
    lo, hi = np.int64(t.split) << np.int64(32), (np.int64(t.split) + 1) << np.int64(32)
    keep = np.ones(len(ends), bool)
    counts_ = {}
    for reason, d in (("exact_duplicate", t.exact_dir), ("near_duplicate", t.near_dir)):
        drop = _drops(Path(d), t.parts) if reason == "exact_duplicate" else \
            (np.load(Path(d) / "drop.npy") if (Path(d) / "drop.npy").is_file() else np.zeros(0, np.int64))
        mine = (drop[(drop >= lo) & (drop < hi)] - lo).astype(np.int64)
        keep[mine] = False
        counts_[reason] = int(len(mine))
    starts = np.concatenate([[0], ends[:-1]]) if len(ends) else ends
    kept_ends = np.cumsum(ends[keep] - starts[keep]).astype(np.int64)
    with open(src / "docs.txt", "rb") as f_in, open(tmp / "docs.txt", "wb") as f_out:
        # consecutive kept documents are one copy
        idx = np.flatnonzero(keep)
        if len(idx):
            breaks = np.flatnonzero(np.diff(idx) != 1)
            firsts, lasts = np.concatenate([[0], breaks + 1]), np.concatenate([breaks, [len(idx) - 1]])
            for a, b in zip(firsts.tolist(), lasts.tolist()):
                s, e = int(starts[idx[a]]), int(ends[idx[b]])
                f_in.seek(s)
                f_out.write(f_in.read(e - s))
    kept_ends.tofile(tmp / "docs.end")
    held[keep].tofile(tmp / "docs.val")
    return {"kept": int(keep.sum()), "val": int(held[keep].sum()),
            "chars": int(np.load(src / "chars.npy")[keep].sum()),
            "bytes": int(kept_ends[-1]) if len(kept_ends) else 0, "dropped": counts_}


def _splits(files: List[Path], builtin: Optional[str], decoding=None) -> List[tuple]:
    """(files, builtin, byte range) of each read task: a builtin source, then the input files in
    order: an uncompressed .jsonl file in byte ranges of at most SPLIT_BYTES (so one big file does
    not become one long task; in a small corpus smaller, down to MIN_SPLIT_BYTES, for about
    READ_TASKS tasks), a file of at least that size alone, smaller ones together, up to that size
    and GROUP_FILES files a task (a task's fixed cost, ~10 ms here, would otherwise be most of the
    work of 50,000 files of 300 bytes). Document order (and so which copy of a duplicate stays) is
    the input order whatever the splits; the splits depend on the input files only (and a large
    .jsonl file's charset: UTF-16 lines cannot be found in byte ranges), never on the engine."""
    out = [([], builtin, None)] if builtin else []
    sizes = [f.stat().st_size if f.is_file() else 0 for f in files]
    split = min(SPLIT_BYTES, max(MIN_SPLIT_BYTES, sum(sizes) // READ_TASKS))
    group: List[str] = []
    group_bytes = 0
    for f, size in zip(files, sizes):
        if group and (size >= split or group_bytes + size > split or len(group) == GROUP_FILES):
            out.append((group, None, None))
            group, group_bytes = [], 0
        if size < split:
            group.append(str(f))
            group_bytes += size
        elif file_kind(f) == (".jsonl", "") and size > split and splittable(f, decoding):
            out += [([str(f)], None, (a, min(a + split, size))) for a in range(0, size, split)]
        else:
            out.append(([str(f)], None, None))
    if group:
        out.append((group, None, None))
    return out


def clean_store(src, cfg, out: Path, work: Path, engine, plain: Callable) -> Dict:
    """Build the source's document store (DocStore layout) in `out` from its splits; its stats."""

    t0 = time.time()
    clean, dedup = plain(cfg.clean), plain(cfg.dedup)
    Cleaner(SimpleNamespace(**clean))   # a bad setting fails here, once, not inside every task
    check_settings(dedup)
    decoding = Decoding(getattr(src, "name", ""), getattr(src, "encoding", None))
    splits = _splits(src.files, src.builtin, decoding)
    lsh = lsh_params(dedup) if dedup["near"] else None
    in_bytes = sum(f.stat().st_size for f in src.files if f.is_file())
    workers = max(1, int(getattr(cfg, "workers", 1) or 1))
    compiled = in_bytes / workers >= COMPILED_MIN_BYTES * (1 if dedup["near"] else 32)
    parts = partitions(in_bytes)
    reads = [ReadTask(str(work / "read" / f"{i:05d}"), i, f, b, src.text_field, clean, dedup,
                      float(cfg.val_fraction), r, lsh, parts=parts, compiled=compiled,
                      source=decoding.source, encoding=decoding.fallback)
             for i, (f, b, r) in enumerate(splits)]
    read_recs = run_stage(engine, "read", work / "read", read_split, reads)
    read_dirs = [t.out for t in reads]
    exact_dir, near_dir, comp_dir = work / "exact", work / "near", work / "components"
    if dedup["exact"]:
        run_stage(engine, "exact", exact_dir, exact_part,
                  [PartTask(str(exact_dir / str(p)), p, read_dirs, "", parts) for p in range(parts)])
    if dedup["near"]:
        run_stage(engine, "near", near_dir, near_part,
                  [PartTask(str(near_dir / str(q)), q, read_dirs, str(exact_dir), parts)
                   for q in range(parts)])
        run_stage(engine, "components", comp_dir, components,
                  [ComponentsTask(str(comp_dir / "0"), str(near_dir), parts)])
    finals = [FinalTask(str(work / "final" / f"{i:05d}"), i, read_dirs[i], str(exact_dir),
                        str(comp_dir / "0"), parts)
              for i in range(len(splits))]
    final_recs = run_stage(engine, "final", work / "final", final_split, finals)
    t1 = time.perf_counter()
    _concat_stores([Path(t.out) for t in finals], out)
    _cost("concat (driver)")["wall_s"] += time.perf_counter() - t1     # serial, in the driver
    dropped: Counter = Counter()
    for r in read_recs:
        dropped.update(r["dropped"])
    for r in final_recs:
        dropped.update({k: v for k, v in r["dropped"].items() if v})
    kept = sum(r["kept"] for r in final_recs)
    held = sum(r["val"] for r in final_recs)
    undecodable = summary([r.get("undecodable", []) for r in read_recs])
    return {"in": sum(r["in"] for r in read_recs), "kept": kept, "train": kept - held, "val": held,
            "chars": sum(r["chars"] for r in final_recs), "dropped": dict(sorted(dropped.items())),
            **({"undecodable": undecodable} if undecodable["files"] else {}),
            "split_for_length": {k: sum(r["split_for_length"][k] for r in read_recs)
                                 for k in ("documents", "extra_pieces")},
            "seconds": round(time.time() - t0, 3)}


def _concat_stores(parts: List[Path], out: Path) -> None:
    """One document store from the splits' (byte copies; offsets shifted)."""
    out.mkdir(parents=True, exist_ok=True)
    base = 0
    with open(out / "docs.txt", "wb") as txt, open(out / "docs.end", "wb") as end, \
            open(out / "docs.val", "wb") as val:
        for p in parts:
            with open(p / "docs.txt", "rb") as f:
                shutil.copyfileobj(f, txt, 1 << 22)
            ends = np.fromfile(p / "docs.end", np.int64)
            (ends + base).astype(np.int64).tofile(end)
            if len(ends):
                base += int(ends[-1])
            with open(p / "docs.val", "rb") as f:
                shutil.copyfileobj(f, val)


# ---------------------------------------------------------------- dataset

@dataclass
class TokenizeTask:
    out: str
    store: str
    start: int
    stop: int
    model: str
    capacity: int
    method: str
    eod_id: int
    pad_id: int
    max_room: Optional[int]
    num_shards: int


def tokenize_chunk(t: TokenizeTask) -> Dict:
    return _commit(t.out, "tokenize", lambda tmp: _tokenize_chunk(t, tmp))


def shard_of(texts: Sequence[str], num_shards: int) -> np.ndarray:
    """The output shard of each training document: a hash of its text."""
    if num_shards == 1:
        return np.zeros(len(texts), np.int64)
    return np.fromiter((stable_int(t.encode(), 32) % num_shards for t in texts), np.int64, count=len(texts))


def _tokenize_chunk(t: TokenizeTask, tmp: Path) -> Dict:
    import sentencepiece as spm

    sp = _cached(("sp", t.model), lambda: spm.SentencePieceProcessor(model_file=t.model))
    words = _cached(("words", t.model), lambda: WordCache(sp) if WordCache.fits(sp) else None)
    store = _cached(("store", t.store), lambda: DocStore(Path(t.store)))
    texts = store.texts(t.start, t.stop)
    docs = encode_texts(sp, texts, t.eod_id, words)
    held = store.held_out[t.start:t.stop]
    shard = shard_of(texts, t.num_shards)
    split = {}
    for s in np.unique(shard[~held]).tolist():
        train = _select(docs, ~held & (shard == s))
        if t.method == "best_fit":
            rows, rest, n_split = pack_best_fit(train, t.capacity, t.pad_id, t.max_room)
            split[str(s)] = n_split
            np.savez(tmp / f"train-{s}.npz", ids=rows.ids, seg_lens=rows.seg_lens, seg_counts=rows.seg_counts,
                     tokens=rest.tokens, lens=rest.lens)
        else:
            np.savez(tmp / f"train-{s}.npz", tokens=train.tokens, lens=train.lens)
    if held.any():
        val = _select(docs, held)
        np.savez(tmp / "val-0.npz", tokens=val.tokens, lens=val.lens)
    return {"tokens": docs.num_tokens, "split": split}


@dataclass
class ShardPart:
    split: str
    index: int
    count: int
    expected_bytes: int


@dataclass
class ShardTask:
    out: str
    parts: List[ShardPart]   # the shards this task writes: one train shard (the first also the val shard)
    chunks: List[str]
    capacity: int
    pad_id: int
    method: str
    stream: bool = False     # started beside the tokenize stage: each chunk read once it is published


# Set by the driver when the tokenize stage a streamed writer waits on has failed or was stopped.
_stop_streaming = threading.Event()
STREAM_POLL_S = 0.02


class _Stopped(Exception):
    pass


def _published(chunk: str, wait: bool) -> Dict:
    """A tokenize chunk's completion record; a streamed writer waits for it to be published."""
    done = Path(chunk) / DONE
    while wait and not done.is_file():
        if _stop_streaming.wait(STREAM_POLL_S):
            raise _Stopped(f"the tokenize stage stopped before {chunk} was published")
    return json.loads(done.read_text())


def write_shard(t: ShardTask) -> Dict:
    return _commit(t.out, "shards", lambda tmp: _write_shard(t, tmp))


def _write_shard(t: ShardTask, tmp: Path) -> Dict:
    written = []
    for part in t.parts:
        sink = SplitSink(tmp, part.split, part.count, t.capacity, t.pad_id, t.method, part.expected_bytes,
                     index=part.index)
        for chunk in t.chunks:
            split_here = _published(chunk, t.stream)["split"]      # documents it split for this shard
            if part.split == "train":
                sink.stats.truncated += split_here.get(str(part.index), 0)
            f = Path(chunk) / f"{part.split}-{part.index}.npz"
            if not f.is_file():
                continue
            z = np.load(f)
            if "ids" in z:
                sink.rows(Rows(z["ids"], z["seg_lens"], z["seg_counts"]))
            sink.docs(Docs(z["tokens"], z["lens"]))
        summary = sink.close()
        written.append({"split": part.split, "rows": summary["rows"], "tokens": summary["tokens"],
                        "truncated": summary["truncated_documents"], "shard": summary["shards"][0]})
    return {"parts": written}


def build_dataset(store_dir: Path, tok_path: Path, tok: Dict, cfg, out: Path, work: Path, engine) -> Dict:
    """Train and val shards of the store in `out`; per-split statistics for the manifest."""
    store = DocStore(store_dir)
    capacity, n = int(cfg.seq_length) + 1, int(cfg.num_shards)
    method = str(cfg.packing)
    max_room = int(LOOSE_ROOM * capacity) if method == "best_fit" else None
    toks = [TokenizeTask(str(work / "tokenize" / f"{c:06d}"), str(store_dir), a, b, str(tok_path), capacity,
                         method, tok["eod_id"], tok["pad_id"], max_room, n)
            for c, (a, b) in enumerate(store.chunks())]
    chunks = [t.out for t in toks]
    text_bytes = int(store.ends[-1]) if len(store) else 0
    expected = text_bytes * 2                                    # ~0.3 tokens/byte x 4 B + headroom
    if text_bytes / n > SHARD_WARN_BYTES:
        print(f"warning: data.num_shards={n} makes shards of ~{text_bytes / n / 2**30:.1f} GiB of text each, "
              f"and writing one holds ~1.3x that in memory (MindRecord's commit): set data.num_shards >= "
              f"{-(-text_bytes // SHARD_WARN_BYTES)}", file=sys.stderr, flush=True)
    # One writer task per train shard; the (small) val shard rides with the first, so a one-shard
    # dataset is one task, with no process of its own. That one writer (the default) streams: it
    # runs in a thread of this process beside the tokenize stage's workers and reads each chunk
    # once it is published, so the writing is hidden behind the tokenizing instead of run after it
    # on one core (several writers run after, on the workers).
    # A writer that fails is reported when the tokenize stage ends (whose published chunks a
    # rerun reuses), not at once: the stage has no way in from another thread but a signal.
    stream = engine.name == "local" and engine.workers > 1 and n == 1
    val = [ShardPart("val", 0, 1, expected // 50)]
    shards = [ShardTask(str(work / "shards" / f"train-{s:05d}"),
                        [ShardPart("train", s, n, expected // n)] + (val if s == 0 else []),
                        chunks, capacity, tok["pad_id"], method, stream)
              for s in range(n)]

    def write() -> List[Dict]:
        return run_stage(engine, "shards", work / "shards", write_shard, shards)

    if stream:
        before = _cost("shards")["wall_s"]
        with _beside(write) as writer:
            run_stage(engine, "tokenize", work / "tokenize", tokenize_chunk, toks)
        done = writer.result
        # the writer's wall time that the tokenize stage did not already cover (the profile's stage
        # wall times then add up to the whole)
        _cost("shards")["wall_s"] = before + min(_cost("shards")["wall_s"] - before, writer.after_s)
    else:
        run_stage(engine, "tokenize", work / "tokenize", tokenize_chunk, toks)
        done = write()
    out_splits = {}
    for split in ("train", "val"):
        stats = SplitStats()
        for t, rec in zip(shards, done):
            for r in rec["parts"]:
                if r["split"] != split:
                    continue
                for name in (r["shard"]["file"], r["shard"]["file"] + ".db"):
                    _link(Path(t.out) / name, out / name)
                stats.rows += r["rows"]
                stats.tokens += r["tokens"]
                stats.truncated += r["truncated"]
                stats.shards.append(r["shard"])
        out_splits[split] = stats.summary(capacity)
    return out_splits


class _Beside:
    result: List[Dict]
    after_s: float = 0.0        # how long the thread ran on after the with-body ended


@contextmanager
def _beside(fn: Callable[[], List[Dict]]):
    """fn in a thread while the with-body runs; its result (or its error) once both are done. When
    the body fails or is interrupted, the thread is told to stop (_stop_streaming) and joined first."""
    out, failed = _Beside(), []

    def run() -> None:
        try:
            out.result = fn()
        except BaseException as exc:        # handed to the driver's thread below
            failed.append(exc)

    _stop_streaming.clear()
    thread = threading.Thread(target=run, name="shard-writer", daemon=True)
    thread.start()
    try:
        yield out
    except BaseException:
        _stop_streaming.set()
        thread.join()
        raise
    body_end = time.perf_counter()
    thread.join()
    out.after_s = time.perf_counter() - body_end
    if failed:
        raise failed[0]


def _link(src: Path, dst: Path) -> None:
    """A task's file into the dataset being built: a hard link (the work copy stays complete, so a
    re-run after a failure before publication still finds its task done), else a copy."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)

