"""data.engine=ray against data.engine=local: the same kept documents and byte-identical shards, on
a corpus with exact duplicates, near duplicates and bad documents spread over several input files;
and restarts at task granularity (a failed task, a lost Ray worker).

Ray runs here as a private instance on this machine (2 CPUs, no dashboard, its files under the
test's tmp dir), started and shut down by prepare() itself.
"""
import hashlib
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

import pretrain_faults
import pytest

from pretrain.data import prepare, stages
from tests.unit.test_data_pipeline import data_cfg, paragraphs

# Not imported here: this pytest process goes on to import mindspore, which must load before Ray.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="pip install 'pretrain[ray]'")


def _near(text: str, i: int) -> str:
    """The text with its last word changed: one word-5-shingle of 36+ differs (Jaccard > 0.94)."""
    words = text.split()
    words[-1] = f"changed{i}"
    return " ".join(words)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Four jsonl files (splits): 240 distinct paragraphs of 40+ words, then exact duplicates (case and
    punctuation changed) and near duplicates of earlier files' documents, short documents, a
    malformed line and a NUL-bearing document."""
    root = tmp_path_factory.mktemp("raycorpus")
    paras = [p for p in paragraphs() if len(p.split()) >= 40][:240]
    assert len(paras) == 240
    files = []
    for f in range(4):
        lines = [json.dumps({"text": t}) for t in paras[60 * f:60 * (f + 1)]]
        if f:
            prev = paras[:60 * f]
            lines += [json.dumps({"text": prev[(7 * i + f) % len(prev)].upper() + " !!"}) for i in range(6)]
            lines += [json.dumps({"text": _near(prev[(11 * i + 3 + f) % len(prev)], 10 * f + i)})
                      for i in range(6)]
            lines += [json.dumps({"text": "too short"}), '{"text": broken json',
                      json.dumps({"txt": "no field"})]
        path = root / f"part-{f}.jsonl"
        path.write_text("\n".join(lines) + "\n")
        files.append(path)
    return files


def _cfg(cache, corpus, engine, **over):
    return data_cfg(cache, {"web": corpus}, **{"num_shards": 2, "workers": 2, "engine": engine, **over})


def _manifest(p, *drop):
    m = dict(p.manifest)
    for key in ("seconds", *drop):
        m.pop(key)
    return m


def _given_tokenizer(local):
    """The tokenizer local trained, given by path: a run that does not train one again (faster);
    the manifest then records that path and its config hash differs, nothing else."""
    return {"tokenizer.path": str(local.tokenizer_path)}


def _files(p):
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(p.dir.iterdir()) if f.name != "manifest.json"}


@pytest.fixture(scope="module")
def ray_tmp():
    # Ray's socket paths must stay short: a private dir under /tmp, not pytest's deep tmp_path.
    d = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    old = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = d
    yield Path(d)
    if old is None:
        os.environ.pop("RAY_TMPDIR", None)
    else:
        os.environ["RAY_TMPDIR"] = old
    import shutil
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def local(corpus, tmp_path_factory):
    return prepare(_cfg(tmp_path_factory.mktemp("local"), corpus, "local"), progress=False)["web"]


@pytest.mark.slow   # moved out of the default suite's 5 minutes (still run by CI)
def test_ray_and_local_write_byte_identical_shards_and_manifests(corpus, local, ray_tmp, tmp_path,
                                                                  monkeypatch):
    # One Ray worker dies in the middle of the read stage (os._exit in a task): Ray retries the
    # task elsewhere, and the output is still the same.
    monkeypatch.setenv(pretrain_faults.DATA_FAIL, f"read/00002:exit:{tmp_path / 'died'}")   # Ray's workers
    # and on Ray the files are read in 4 kB byte ranges (local read each whole): same output
    monkeypatch.setattr(stages, "SPLIT_BYTES", 4096)
    on_ray = prepare(_cfg(tmp_path / "cache", corpus, "ray"), progress=False)["web"]
    assert stages.counts["read"][0] > 4 * 3
    assert (tmp_path / "died").exists(), "the injected worker death did not happen"
    assert not sys.modules["ray"].is_initialized(), "prepare() leaves no Ray instance behind"

    docs = local.manifest["documents"]
    assert docs["dropped"]["exact_duplicate"] == 18 and docs["dropped"]["near_duplicate"] == 18
    assert docs["dropped"]["too_short"] == 3 and docs["dropped"]["malformed_json"] == 3
    assert docs["in"] == docs["kept"] + sum(docs["dropped"].values()) and docs["kept"] == 240
    assert _manifest(on_ray) == _manifest(local)
    assert _files(on_ray) == _files(local)
    assert len([f for f in _files(local) if f.endswith(".mindrecord")]) == 3      # train x2 + val
    assert not (tmp_path / "cache" / "work").exists() or not any((tmp_path / "cache" / "work").iterdir())


def test_a_rerun_after_a_failed_task_redoes_only_unfinished_tasks(corpus, local, tmp_path, data_fail):
    # (the four small files are one read task, grouped: the partitioned near stage has several tasks)
    cfg = _cfg(tmp_path / "cache", corpus, "local", **_given_tokenizer(local))
    undo = data_fail("near/5")
    with pytest.raises(RuntimeError, match="injected failure in task near/5"):
        prepare(cfg, progress=False)
    work = next((tmp_path / "cache" / "work").iterdir())
    done = sorted(p.name for p in (work / "near").iterdir())
    assert "5" not in done and all((work / "near" / d / "done.json").is_file() for d in done)
    undo()
    stages.counts.clear()
    again = prepare(cfg, progress=False)["web"]
    assert stages.counts["read"] == (0, 1) and stages.counts["exact"] == (0, stages.EXACT_PARTS)
    assert stages.counts["near"] == (stages.BAND_PARTS - len(done), len(done))   # only what had not committed
    assert stages.counts["components"] == (1, 0) and stages.counts["final"] == (1, 0)
    assert stages.counts["tokenize"][1] == 0                        # a later stage: all new
    assert _manifest(again, "tokenizer", "keys") == _manifest(local, "tokenizer", "keys")
    assert _files(again) == _files(local)
    assert not any(work.parent.iterdir())                           # work removed once published


def test_ranks_above_0_wait_for_the_published_data_and_never_build(corpus, local, tmp_path, monkeypatch):
    import threading

    from pretrain.config.errors import PretrainDataError
    prepare_module = sys.modules["pretrain.data.prepare"]     # the module (the package exports the function)
    monkeypatch.setattr(prepare_module, "POLL_S", 0.2)
    monkeypatch.setenv("RANK_ID", "3")                     # what msrun sets on rank 3
    cfg = _cfg(tmp_path / "cache", corpus[:2], "local", **_given_tokenizer(local))
    monkeypatch.setattr(prepare_module, "WAIT_S", 0.5)
    with pytest.raises(PretrainDataError, match=r"rank 3: waited .* data.cache_dir=.* is still missing"):
        prepare(cfg, progress=False)
    assert not (tmp_path / "cache" / "work").exists() and not (tmp_path / "cache" / "clean").exists()

    monkeypatch.setattr(prepare_module, "WAIT_S", 600)
    got = {}
    waiter = threading.Thread(target=lambda: got.update(prepare(cfg, progress=False)))
    waiter.start()
    built = prepare(cfg, progress=False, wait=False)["web"]    # rank 0
    waiter.join(60)
    assert not waiter.is_alive() and got["web"].reused and got["web"].dir == built.dir
    assert _manifest(got["web"]) == _manifest(built)


def test_a_jsonl_file_read_in_byte_ranges_yields_what_one_read_does(tmp_path):
    from pretrain.data.sources import read_documents, read_jsonl_range
    lines = [json.dumps({"text": f"document {i} " + "word " * (i % 37)}) for i in range(300)]
    lines[5], lines[17], lines[40] = "", '{"text": broken', json.dumps({"other": 1})
    path = tmp_path / "a.jsonl"
    path.write_text("\n".join(lines) + "\n\n")
    whole = list(read_documents([path], "text", 10_000))
    size = path.stat().st_size
    for step in (1, 7, 100, 1000, size):
        parts = [i for a in range(0, size, step)
                 for i in read_jsonl_range(path, a, min(a + step, size), "text", 10_000)]
        assert parts == whole, step
