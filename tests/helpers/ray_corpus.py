"""The corpus and config the data.engine=ray tests compare against data.engine=local (the fast ones and
the two-node cluster), and the private Ray temp dir they run under."""
import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from tests.helpers.data_files import data_cfg, paragraphs


def near(text: str, i: int) -> str:
    """The text with its last word changed: one word-5-shingle of 36+ differs (Jaccard > 0.94)."""
    words = text.split()
    words[-1] = f"changed{i}"
    return " ".join(words)


def mixed_corpus(root: Path):
    """Four jsonl files (splits) under root: 240 distinct paragraphs of 40+ words, then exact duplicates
    (case and punctuation changed) and near duplicates of earlier files' documents, short documents, a
    malformed line and a NUL-bearing document; their paths."""
    paras = [p for p in paragraphs() if len(p.split()) >= 40][:240]
    assert len(paras) == 240
    files = []
    for f in range(4):
        lines = [json.dumps({"text": t}) for t in paras[60 * f:60 * (f + 1)]]
        if f:
            prev = paras[:60 * f]
            lines += [json.dumps({"text": prev[(7 * i + f) % len(prev)].upper() + " !!"}) for i in range(6)]
            lines += [json.dumps({"text": near(prev[(11 * i + 3 + f) % len(prev)], 10 * f + i)})
                      for i in range(6)]
            lines += [json.dumps({"text": "too short"}), '{"text": broken json',
                      json.dumps({"txt": "no field"})]
        path = root / f"part-{f}.jsonl"
        path.write_text("\n".join(lines) + "\n")
        files.append(path)
    return files


def engine_cfg(cache, corpus, engine, **over):
    return data_cfg(cache, {"web": corpus}, **{"num_shards": 2, "workers": 2, "engine": engine, **over})


def manifest(p, *drop):
    """p's manifest less its timing and the keys named."""
    m = dict(p.manifest)
    for key in ("seconds", *drop):
        m.pop(key)
    return m


def shard_hashes(p):
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(p.dir.iterdir()) if f.name != "manifest.json"}


@contextlib.contextmanager
def private_ray_tmpdir():
    # Ray's socket paths must stay short: a private dir under /tmp, not pytest's deep tmp_path.
    d = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    old = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = d
    try:
        yield Path(d)
    finally:
        if old is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = old
        shutil.rmtree(d, ignore_errors=True)
