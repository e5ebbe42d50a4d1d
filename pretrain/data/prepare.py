"""prepare(data_cfg): every source of the data config, ready to load, built once and cached.

Stages and what caches them (all under data.cache_dir, content-addressed, published atomically;
each runs as tasks on data.engine, see pretrain.data.stages, whose outputs wait in work/ until the
stage is published, so a rerun redoes only unfinished tasks):
  clean/<source>-<key>/       read -> clean -> dedup -> held-out split   key: inputs + clean/dedup/val
  tokenizers/<key>/           sentencepiece trained on all sources       key: clean keys + tokenizer cfg
  datasets/<source>-<key>/    tokenize -> pack -> shard -> manifest      key: clean key + tokenizer
                                                                         file + seq_length/packing/shards
Inputs are identified by path and the sha256 of their bytes (files: hashing.content_fingerprint,
so an edit is never missed, whatever its size and mtime) or by the generator's code and the Python
installation (builtin sample sources). A second call with the same inputs and config only hashes
the inputs and the tokenizer file and reads the manifests.

What is reused is checked first (file sizes against what the stage recorded, the tokenizer
loads, the manifest parses); a damaged entry is set aside and built again, with a warning line.
Paths inside the cache are stored relative to it, so a moved cache (a new data.cache_dir or
PRETRAIN_CACHE) is still reused. Temp directories never outlive their build (fsutil.building);
ones a kill -9 left are swept at the start of the next call, and SIGINT/SIGTERM end the call
with one line and exit code 130/143 (interrupt.py).
"""
import errno
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from omegaconf import DictConfig, OmegaConf

from pretrain.config.errors import PretrainDataError
from pretrain.config.validate import check_data_config
from pretrain.data import clean as clean_rules, sample, stages, tokenizer as tokenizers
from pretrain.data.charsets import warnings
from pretrain.data.docstore import DocStore
from pretrain.data.engine import make_engine
from pretrain.data.fsutil import building, sweep_stale, temp_dir_for, write_json_atomic
from pretrain.data.hashing import UNSPACED, content_fingerprint, digest, file_sha256
from pretrain.data.interrupt import stop_on_signals
from pretrain.data.manifest import LAYOUT, check
from pretrain.data.sources import resolve_files
from pretrain.data.stages import WORK_LAYOUT, forget, sweep_work
from pretrain.data.stages import progress as stage_progress
from pretrain.data.tokenizer import tokenizer_vocab_size  # noqa: F401  (part of this module's API)

VERSION = 4            # bump when the prepared bytes change for the same config (3: BOMs, parquet types;
                       # 4: UTF-16/32 decoded, a stray undecodable byte drops its line, not the file's rest)


@dataclass
class Prepared:
    name: str
    dir: Path
    manifest: Dict
    tokenizer_path: Path
    train_shards: List[Path]
    val_shards: List[Path]
    seq_length: int
    num_shards: int
    reused: bool = False

    @classmethod
    def load(cls, directory: Path, reused: bool) -> "Prepared":
        m = json.loads((directory / "manifest.json").read_text())
        return cls(m["name"], directory, m, _tokenizer_file(m["tokenizer"]["path"], directory.parent.parent),
                   [directory / s["file"] for s in m["train"]["shards"]],
                   [directory / s["file"] for s in m["val"]["shards"]],
                   m["seq_length"], m["num_shards"], reused)


def _in_cache(path: Path, cache: Path) -> str:
    """How a manifest records a file: relative to the cache when it lies inside (so the cache can
    move), else absolute (a tokenizer the user gave)."""
    path, cache = Path(path).resolve(), cache.resolve()
    return str(path.relative_to(cache)) if path.is_relative_to(cache) else str(path)


def _tokenizer_file(recorded: str, cache: Path) -> Path:
    p = Path(recorded)
    if not p.is_absolute():
        return (cache / p).resolve()
    if not p.exists() and len(p.parts) >= 3 and p.parts[-3] == "tokenizers":
        moved = cache / "tokenizers" / p.parts[-2] / p.parts[-1]   # a manifest from before relative paths
        if moved.is_file():
            return moved.resolve()
    return p


@dataclass
class _Source:
    name: str
    files: List[Path]
    builtin: Optional[str]
    text_field: str
    clean_key: str
    encoding: Optional[str] = None      # of the source's files that are not UTF-8 (pretrain.data.charsets)


def _plain(node) -> Dict:
    node = node if isinstance(node, DictConfig) else OmegaConf.structured(node)
    return OmegaConf.to_container(node, resolve=True)


STAGES = ("clean", "tokenizers", "datasets", "work")


class _NotReady(Exception):
    """A rank that only waits found a stage not yet published."""


class _LazyEngine:
    """data.engine, started only when a stage has to be built (a fully cached call starts no Ray).
    build=False: a stage to build raises _NotReady instead (a rank waiting for rank 0)."""

    def __init__(self, cfg, build: bool = True) -> None:
        self.cfg, self._engine, self.build = cfg, None, build

    def require(self, what: str) -> None:
        if not self.build:
            raise _NotReady(what)

    def get(self, what: str = "a data stage"):
        self.require(what)
        if self._engine is None:
            self._engine = make_engine(self.cfg)
        return self._engine

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()


WAIT_S = 24 * 3600      # how long a rank waits for rank 0's data before it gives up
POLL_S = 10.0


def prepare(data_cfg, *, progress: bool = True, wait: Optional[bool] = None) -> Dict[str, Prepared]:
    """All sources of `data_cfg`, each a Prepared (built now, or reused from the cache).
    progress: tqdm bars on the long stages (only when stderr is a terminal) and a line when a
    tokenizer is trained.
    wait: only wait until the datasets are published (by another process, e.g. rank 0), build
    nothing. None: wait when this process is a rank > 0 of a distributed job (RANK_ID, set by
    msrun), so a multi-node job prepares its data once, on rank 0, whatever starts the ranks."""
    if wait is None:
        wait = int(os.environ.get("RANK_ID", "0") or 0) > 0
    if not wait:
        return _prepare(data_cfg, progress, build=True)
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            return _prepare(data_cfg, progress=False, build=False)
        except _NotReady as missing:
            if time.monotonic() > deadline:
                raise PretrainDataError(
                    f"rank {os.environ.get('RANK_ID', '?')}: waited {WAIT_S / 3600:.0f} h for rank 0 to "
                    f"publish the data in data.cache_dir={data_cfg.cache_dir} ({missing} is still missing); "
                    f"it must be a directory all nodes share, and rank 0 must be preparing it") from None
            time.sleep(POLL_S)


def _prepare(data_cfg, progress: bool, build: bool) -> Dict[str, Prepared]:
    check_data_config(data_cfg)   # the same rules `python -m pretrain` checks before it gets here
    cache = Path(str(data_cfg.cache_dir)).expanduser()
    engine = _LazyEngine(data_cfg, build)
    stage_progress.on = progress
    try:
        note = f"; finished stages and tasks stay in {cache} and are reused"
        with stop_on_signals("data preparation", note):
            try:
                sweep_stale(*(cache / stage for stage in STAGES))
                sources = [_plan(name, src, data_cfg) for name, src in data_cfg.sources.items()]
                tok_path = _tokenizer(data_cfg, sources, cache, progress, engine)
                return {s.name: _dataset(s, tok_path, data_cfg, cache, progress, engine) for s in sources}
            finally:
                engine.close()
                forget()                      # this process's per-task caches (tokenizers, stores)
                sweep_work(cache / "work")    # what tasks stopped by an error or interrupt left
    except (OSError, RuntimeError) as exc:
        if _disk_full(exc):   # from any writer, in any worker: numpy's zip writer names no file
            raise PretrainDataError(f"data.cache_dir={cache}: the disk filled up while preparing the data "
                                    f"({_free(cache)} free now that the unfinished output is removed); free "
                                    f"space there or point data.cache_dir (or PRETRAIN_CACHE) at a larger disk: "
                                    f"finished stages are kept and reused") from None
        if not isinstance(exc, OSError):
            raise
        # Writing the cache failed (no permission, a file where a directory belongs): say which
        # cache; errors reading the inputs are counted per document, not raised.
        where = os.path.abspath(exc.filename) if isinstance(exc.filename, str) else ""
        if not where.startswith(os.path.abspath(cache) + os.sep):
            raise
        raise PretrainDataError(f"data.cache_dir={cache}: {exc.strerror or exc} ({where}); free space "
                                f"there or point data.cache_dir (or PRETRAIN_CACHE) at a writable directory"
                                ) from None


def _disk_full(exc: BaseException) -> bool:
    """A full disk (or quota), as an OSError or as MindRecord's RuntimeError ("No free disk to be used
    while writing mindrecord files", shard_writer.cc)."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    return "No free disk" in str(exc)


def _free(cache: Path) -> str:
    try:
        return f"{shutil.disk_usage(cache).free / 2**20:.1f} MiB"
    except OSError:
        return "unknown"


def _discard(final: Path, why: str) -> None:
    """Set a damaged cache entry aside (under this process's temp name, so a crash leaves it to
    the sweep) and delete it; the caller builds it again."""
    print(f"warning: {final}: {why}; building it again", file=sys.stderr, flush=True)
    aside = temp_dir_for(final)
    aside.rmdir()
    try:
        os.replace(final, aside)
    except FileNotFoundError:          # another process set it aside first
        return
    shutil.rmtree(aside, ignore_errors=True)


def _damaged_store(final: Path) -> Optional[str]:
    """Why a cached document store cannot be reused, or None: its files must have the sizes
    its stats say (8-byte end offsets, one flag byte and the texts of each kept document)."""
    try:
        stats = json.loads((final / "stats.json").read_text())
        n = int(stats["kept"])
        sizes = {f: (final / f).stat().st_size for f in ("docs.txt", "docs.end", "docs.val")}
        text_bytes = 0
        if n and sizes["docs.end"] == 8 * n:
            with open(final / "docs.end", "rb") as f:
                f.seek(8 * (n - 1))
                text_bytes = int.from_bytes(f.read(8), "little")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"unreadable ({exc})"
    want = {"docs.txt": text_bytes, "docs.end": 8 * n, "docs.val": n}
    bad = [f"{f} has {sizes[f]} bytes, expected {want[f]}" for f in want if sizes[f] != want[f]]
    return ", ".join(bad) or None


def _damaged_dataset(final: Path) -> Optional[str]:
    """Why a cached dataset cannot be reused, or None: its manifest parses and every shard and
    index it lists is there, with the size it recorded (manifests before sizes: present)."""
    try:
        m = json.loads((final / "manifest.json").read_text())
        shards = m["train"]["shards"] + m["val"]["shards"]
        if not isinstance(m["tokenizer"]["path"], str):
            return "its manifest names no tokenizer"
        for s in shards:
            for name, size in ((s["file"], s.get("bytes")), (s["file"] + ".db", s.get("index_bytes"))):
                have = (final / name).stat().st_size
                if size is not None and have != size:
                    return f"{name} has {have} bytes, its manifest says {size}"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"unreadable ({exc})"
    return None


def _plan(name: str, src, cfg) -> _Source:
    files = resolve_files(name, list(src.paths)) if src.paths else []
    inputs = {"files": content_fingerprint(files),
              "builtin": sample.fingerprint(src.builtin) if src.builtin else None}
    encoding = src.get("encoding")
    # the scripts shingled by character are part of what near dedup means: another table, another key
    key = digest({"v": VERSION, "inputs": inputs, "text_field": src.text_field, "clean": _plain(cfg.clean),
                  "dedup": _plain(cfg.dedup), "val_fraction": cfg.val_fraction,
                  "unspaced": UNSPACED if cfg.dedup.near else None,
                  # what a Chinese or Japanese letter weighs in the length and symbol filters
                  "wide": [clean_rules.WIDE, clean_rules.WIDE_RANGES],
                  # it decodes the bytes into documents (unset: the key as before the key existed)
                  **({"encoding": encoding} if encoding is not None else {})})
    return _Source(name, files, src.builtin, src.text_field, key, encoding)


def _clean_store(src: _Source, cfg, cache: Path, progress: bool, engine: _LazyEngine) -> Tuple[Path, Dict]:
    """The source's document store, ingesting it unless cached; (dir, counts)."""
    final = cache / "clean" / f"{src.name}-{src.clean_key[:16]}"
    if final.is_dir():
        why = _damaged_store(final)
        if why is None:
            return final, _kept_some(src.name, json.loads((final / "stats.json").read_text()))
        engine.require(f"{final} (damaged: {why})")
        _discard(final, why)
    work = cache / "work" / f"clean{WORK_LAYOUT}-{final.name}"
    run_on = engine.get(f"documents {final}")
    try:
        with building(final) as tmp:
            stats = stages.clean_store(src, cfg, tmp, work, run_on, _plain)
            write_json_atomic(tmp / "stats.json", stats)
        for line in warnings(src.name, stats["undecodable"]) if "undecodable" in stats else ():
            print(line, file=sys.stderr, flush=True)
    except Exception:       # OSError, or what a writer makes of a vanished directory
        if not _published_meanwhile(final, _damaged_store):
            raise
        stats = json.loads((final / "stats.json").read_text())
    shutil.rmtree(work, ignore_errors=True)     # every task's output is in the published store now
    return final, _kept_some(src.name, stats)


def _published_meanwhile(final: Path, damaged) -> bool:
    """Whether another process preparing the same cache published `final` while this one built it
    (and, done first, removed the work directory this one was using): then theirs is the result."""
    return final.is_dir() and damaged(final) is None


def _kept_some(name: str, stats: Dict) -> Dict:
    """The stats of a source that kept documents; else why not, as a one-line error."""
    if not stats["kept"]:
        dropped = sorted(stats["dropped"].items(), key=lambda kv: (-kv[1], kv[0]))
        why = ", ".join(f"{n} {reason}" for reason, n in dropped) or "no documents read"
        raise PretrainDataError(f"0 of {stats['in']} documents kept from {name}: {why} (check "
                                f"data.sources.{name} and the filters data.clean.*, data.dedup.*)")
    return stats


def _tokenizer(cfg, sources: List[_Source], cache: Path, progress: bool, engine: _LazyEngine) -> Path:
    tcfg = cfg.tokenizer
    if tcfg.path:
        return tokenizers.check_given(str(tcfg.path))
    key = digest({"v": VERSION, "clean": sorted(s.clean_key for s in sources), "tokenizer": _plain(tcfg)})
    final = cache / "tokenizers" / key[:16]
    if final.is_dir():
        why = tokenizers.unusable(final / "tokenizer.model")
        if why is None:
            return final / "tokenizer.model"
        engine.require(f"{final} (damaged: {why})")
        _discard(final, why)
    engine.require(f"tokenizer {final}")
    stores = [(_clean_store(s, cfg, cache, progress, engine)) for s in sources]
    docs = sum(st["train"] for _, st in stores)
    chars = sum(st["chars"] for _, st in stores)
    if not docs:
        raise PretrainDataError("data.tokenizer.train: no training documents left after cleaning to train "
                                "a tokenizer on (check data.sources and data.clean)")

    def texts():
        for directory, _ in stores:
            yield from DocStore(directory).iter_texts(held_out=False)   # never the held-out split

    if progress:
        print(f"training a {tcfg.model_type} tokenizer (vocab {tcfg.vocab_size}) on "
              f"{len(sources)} source(s), {chars / 1e6:.1f} M chars", flush=True)
    every = tokenizers.keep_every(docs, chars, tcfg.train_sentences)
    started = time.perf_counter()
    with building(final) as tmp:
        model = tokenizers.train(tokenizers.training_sentences(texts(), every), tmp, tcfg, cfg.workers)
        got = tokenizers.tokenizer_vocab_size(model)
        if got < int(tcfg.vocab_size):   # sentencepiece stops where the corpus runs out of merges
            raise PretrainDataError(
                f"data.tokenizer.vocab_size={tcfg.vocab_size}: {chars / 1e6:.1f} M chars of training text "
                f"yield only {got} pieces; set model.vocab_size={got} (the tokenizer follows it), add text, "
                f"or give a trained tokenizer with data.tokenizer.path=...")
    if progress:
        print(f"trained the tokenizer: {got} pieces in {time.perf_counter() - started:.0f} s", flush=True)
    return final / "tokenizer.model"


def _dataset(src: _Source, tok_path: Path, cfg, cache: Path, progress: bool, engine: _LazyEngine) -> Prepared:
    key_parts = {"v": VERSION, "clean": src.clean_key, "tokenizer": file_sha256(tok_path),
                 "seq_length": cfg.seq_length, "packing": cfg.packing, "num_shards": cfg.num_shards}
    key = digest(key_parts)
    final = cache / "datasets" / f"{src.name}-{key[:16]}"
    if final.is_dir():
        why = _damaged_dataset(final)
        if why is None:
            return Prepared.load(final, reused=True)
        engine.require(f"{final} (damaged: {why})")
        _discard(final, why)
    store_dir, docs = _clean_store(src, cfg, cache, progress, engine)
    docs = dict(docs)
    clean_s = docs.pop("seconds")
    tok = {**tokenizers.info(tok_path), "path": _in_cache(tok_path, cache)}
    work = cache / "work" / f"dataset-{final.name}"
    engine.require(f"dataset {final}")
    try:
        _build_dataset(src, store_dir, tok_path, tok, docs, clean_s, key, key_parts, cfg, final, work, engine)
    except Exception:       # OSError, or what a writer makes of a vanished directory
        if not _published_meanwhile(final, _damaged_dataset):
            raise
    shutil.rmtree(work, ignore_errors=True)
    return Prepared.load(final, reused=False)


def _build_dataset(src, store_dir, tok_path, tok, docs, clean_s, key, key_parts, cfg, final, work, engine):
    t0 = time.time()
    with building(final) as tmp:
        splits = stages.build_dataset(store_dir, tok_path, tok, cfg, tmp, work, engine.get(f"dataset {final}"))
        manifest = {
            "format": 1, "name": src.name, "seq_length": cfg.seq_length, "num_shards": cfg.num_shards,
            "packing": cfg.packing, "layout": LAYOUT,
            "source": {"paths": [str(f) for f in src.files], "builtin": src.builtin,
                       "text_field": src.text_field, "files": len(src.files)},
            "documents": docs, "train": splits["train"], "val": splits["val"], "tokenizer": tok,
            "keys": {"dataset": key, "clean": src.clean_key, "config": digest(_plain_cfg(cfg)),
                     "tokenizer_sha256": key_parts["tokenizer"]},
            "seconds": {"read_clean_dedup": round(clean_s, 3),
                        "tokenize_pack_shard": round(time.time() - t0, 3)},
        }
        check(manifest)
        write_json_atomic(tmp / "manifest.json", manifest)


def _plain_cfg(cfg) -> Dict:
    """The data config as it shapes the bytes (cache_dir, workers, name and the engine do not)."""
    d = _plain(cfg)
    return {k: v for k, v in d.items() if k not in ("cache_dir", "workers", "name", "engine", "ray")}
