"""A small prepared data cache for the verified-reads tests (issue 40 item 2), the batches a clean
cache gives, and the copies and byte overwrites the tests damage it with."""
import shutil
from pathlib import Path

from pretrain.data import prepare
from pretrain.data.loader import BatchLoader
from pretrain.data.prepare import Prepared
from tests.helpers.data_files import SEQ, data_cfg, paragraphs, write_jsonl

BATCH = 4


def build(root: Path):
    """A small prepared cache under root: its sources dir, the cache and every batch of one pass over
    its train rows, from a clean cache; never modified: tests work on copies."""
    src = root / "src"
    src.mkdir()
    write_jsonl(src / "a.jsonl", paragraphs()[:300])
    cache = root / "cache"
    prepared = prepare(data_cfg(cache, {"web": [src]}), progress=False)
    rows = prepared["web"].manifest["train"]["rows"]
    steps = -(-rows // BATCH)          # one epoch's permutation: every row once
    return src, cache, [loader(prepared).batch(s) for s in range(steps)]


def loader(prepared, **kw):
    return BatchLoader(prepared, {"web": 1.0}, batch_size=BATCH, seq_length=SEQ, seed=3, **kw)


def copy(built, tmp_path):
    """The prepared dataset of a copy of the cache (as prepare would find it, without composing)."""
    cache = tmp_path / "cache"
    shutil.copytree(built[1], cache)
    return {"web": Prepared.load(next((cache / "datasets").iterdir()), reused=True)}


def overwrite(path: Path, at: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(data)
