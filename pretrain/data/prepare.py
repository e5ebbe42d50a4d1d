"""prepare(data_cfg): every source of the data config, ready to load, built once and cached.

Stages and what caches them (all under data.cache_dir, content-addressed, published atomically):
  clean/<source>-<key>/       read -> clean -> dedup -> held-out split   key: inputs + clean/dedup/val
  tokenizers/<key>/           sentencepiece trained on all sources       key: clean keys + tokenizer cfg
  datasets/<source>-<key>/    tokenize -> pack -> shard -> manifest      key: clean key + tokenizer
                                                                         file + seq_length/packing/shards
Inputs are identified by path, size and modification time (files) or by the Python installation
(builtin sample sources). A second call with the same inputs and config only stats the inputs,
hashes the tokenizer file and reads the manifests.
"""
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from omegaconf import DictConfig, OmegaConf

from pretrain.config.errors import PretrainDataError
from pretrain.config.validate import check_data_config
from pretrain.data import tokenizer as tokenizers
from pretrain.data.fsutil import publish_dir, temp_dir_for, write_json_atomic
from pretrain.data.hashing import digest, file_sha256
from pretrain.data.manifest import LAYOUT, check
from pretrain.data.sources import fingerprint, resolve_files
from pretrain.data.tokenizer import tokenizer_vocab_size  # noqa: F401  (part of this module's API)

VERSION = 1            # bump when the prepared bytes change for the same config


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
        return cls(m["name"], directory, m, Path(m["tokenizer"]["path"]),
                   [directory / s["file"] for s in m["train"]["shards"]],
                   [directory / s["file"] for s in m["val"]["shards"]],
                   m["seq_length"], m["num_shards"], reused)


@dataclass
class _Source:
    name: str
    files: List[Path]
    builtin: Optional[str]
    text_field: str
    clean_key: str


def _plain(node) -> Dict:
    node = node if isinstance(node, DictConfig) else OmegaConf.structured(node)
    return OmegaConf.to_container(node, resolve=True)


def prepare(data_cfg, *, progress: bool = True) -> Dict[str, Prepared]:
    """All sources of `data_cfg`, each a Prepared (built now, or reused from the cache).
    progress: tqdm bars on the long stages (only when stderr is a terminal) and a line when a
    tokenizer is trained."""
    check_data_config(data_cfg)   # the same rules `python -m pretrain` checks before it gets here
    cache = Path(str(data_cfg.cache_dir)).expanduser()
    sources = [_plan(name, src, data_cfg) for name, src in data_cfg.sources.items()]
    tok_path = _tokenizer(data_cfg, sources, cache, progress)
    return {s.name: _dataset(s, tok_path, data_cfg, cache, progress) for s in sources}


def _plan(name: str, src, cfg) -> _Source:
    from pretrain.data import sample
    files = resolve_files(name, list(src.paths)) if src.paths else []
    inputs = {"files": fingerprint(files),
              "builtin": sample.fingerprint(src.builtin) if src.builtin else None}
    key = digest({"v": VERSION, "inputs": inputs, "text_field": src.text_field, "clean": _plain(cfg.clean),
                  "dedup": _plain(cfg.dedup), "val_fraction": cfg.val_fraction})
    return _Source(name, files, src.builtin, src.text_field, key)


def _clean_store(src: _Source, cfg, cache: Path, progress: bool) -> Tuple[Path, Dict]:
    """The source's document store, ingesting it unless cached; (dir, counts)."""
    from pretrain.data.ingest import ingest, source_items
    final = cache / "clean" / f"{src.name}-{src.clean_key[:16]}"
    if (final / "stats.json").is_file():
        return final, json.loads((final / "stats.json").read_text())
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_dir_for(final)
    items = source_items(src.files, src.builtin, src.text_field, cfg.clean.max_chars)
    stats = ingest(items, tmp, _plain(cfg.clean), _plain(cfg.dedup), cfg.val_fraction, src.name, progress,
                   cfg.workers)
    write_json_atomic(tmp / "stats.json", stats)
    publish_dir(tmp, final)
    return final, stats


def _tokenizer(cfg, sources: List[_Source], cache: Path, progress: bool) -> Path:
    tcfg = cfg.tokenizer
    if tcfg.path:
        return tokenizers.check_given(str(tcfg.path))
    key = digest({"v": VERSION, "clean": sorted(s.clean_key for s in sources), "tokenizer": _plain(tcfg)})
    final = cache / "tokenizers" / key[:16]
    if (final / "tokenizer.model").is_file():
        return final / "tokenizer.model"
    from pretrain.data.docstore import DocStore
    stores = [(_clean_store(s, cfg, cache, progress)) for s in sources]
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
    tmp = temp_dir_for(final)
    tokenizers.train(tokenizers.training_sentences(texts(), every), tmp, tcfg, cfg.workers)
    publish_dir(tmp, final)
    return final / "tokenizer.model"


def _dataset(src: _Source, tok_path: Path, cfg, cache: Path, progress: bool) -> Prepared:
    key_parts = {"v": VERSION, "clean": src.clean_key, "tokenizer": file_sha256(tok_path),
                 "seq_length": cfg.seq_length, "packing": cfg.packing, "num_shards": cfg.num_shards}
    key = digest(key_parts)
    final = cache / "datasets" / f"{src.name}-{key[:16]}"
    if (final / "manifest.json").is_file():
        return Prepared.load(final, reused=True)
    from pretrain.data.build import build_shards
    from pretrain.data.docstore import DocStore
    store_dir, docs = _clean_store(src, cfg, cache, progress)
    docs = dict(docs)
    clean_s = docs.pop("seconds")
    tok = tokenizers.info(tok_path)
    t0 = time.time()
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_dir_for(final)
    splits = build_shards(src.name, DocStore(store_dir), tok_path, tok, seq_length=cfg.seq_length,
                          method=cfg.packing, num_shards=cfg.num_shards, workers=cfg.workers,
                          out_dir=tmp, progress=progress)
    manifest = {
        "format": 1, "name": src.name, "seq_length": cfg.seq_length, "num_shards": cfg.num_shards,
        "packing": cfg.packing, "layout": LAYOUT,
        "source": {"paths": [str(f) for f in src.files], "builtin": src.builtin, "text_field": src.text_field,
                   "files": len(src.files)},
        "documents": docs, "train": splits["train"], "val": splits["val"], "tokenizer": tok,
        "keys": {"dataset": key, "clean": src.clean_key, "config": digest(_plain_cfg(cfg)),
                 "tokenizer_sha256": key_parts["tokenizer"]},
        "seconds": {"read_clean_dedup": round(clean_s, 3), "tokenize_pack_shard": round(time.time() - t0, 3)},
    }
    check(manifest)
    write_json_atomic(tmp / "manifest.json", manifest)
    publish_dir(tmp, final)
    return Prepared.load(final, reused=False)


def _plain_cfg(cfg) -> Dict:
    """The data config as it shapes the bytes (cache_dir, workers and name do not)."""
    d = _plain(cfg)
    return {k: v for k, v in d.items() if k not in ("cache_dir", "workers", "name")}
