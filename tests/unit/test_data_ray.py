"""data.engine=ray against data.engine=local: the same kept documents and byte-identical shards, on
a corpus with exact duplicates, near duplicates and bad documents spread over several input files;
and restarts at task granularity (a failed task, a lost Ray worker).

Ray runs here as a private instance on this machine (2 CPUs, no dashboard, its files under the
test's tmp dir), started and shut down by prepare() itself.
"""
import importlib.util
import json
import sys

import pretrain_faults
import pytest

from pretrain.data import prepare, stages
from tests.helpers.ray_corpus import engine_cfg, manifest, mixed_corpus, private_ray_tmpdir, shard_hashes

# Not imported here: this pytest process goes on to import mindspore, which must load before Ray.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="pip install 'pretrain[ray]'")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return mixed_corpus(tmp_path_factory.mktemp("raycorpus"))


@pytest.fixture(scope="module")
def ray_tmp():
    with private_ray_tmpdir() as d:
        yield d


def _given_tokenizer(local):
    """The tokenizer local trained, given by path: a run that does not train one again (faster);
    the manifest then records that path and its config hash differs, nothing else."""
    return {"tokenizer.path": str(local.tokenizer_path)}


@pytest.fixture(scope="module")
def local(corpus, tmp_path_factory):
    return prepare(engine_cfg(tmp_path_factory.mktemp("local"), corpus, "local"), progress=False)["web"]


@pytest.mark.slow   # moved out of the default suite's 5 minutes (still run by CI)
def test_ray_and_local_write_byte_identical_shards_and_manifests(corpus, local, ray_tmp, tmp_path,
                                                                  monkeypatch):
    # One Ray worker dies in the middle of the read stage (os._exit in a task): Ray retries the
    # task elsewhere, and the output is still the same.
    monkeypatch.setenv(pretrain_faults.DATA_FAIL, f"read/00002:exit:{tmp_path / 'died'}")   # Ray's workers
    # and on Ray the files are read in 4 kB byte ranges (local read each whole): same output
    monkeypatch.setattr(stages, "SPLIT_BYTES", 4096)
    on_ray = prepare(engine_cfg(tmp_path / "cache", corpus, "ray"), progress=False)["web"]
    assert stages.counts["read"][0] > 4 * 3
    assert (tmp_path / "died").exists(), "the injected worker death did not happen"
    assert not sys.modules["ray"].is_initialized(), "prepare() leaves no Ray instance behind"

    docs = local.manifest["documents"]
    assert docs["dropped"]["exact_duplicate"] == 18 and docs["dropped"]["near_duplicate"] == 18
    assert docs["dropped"]["too_short"] == 3 and docs["dropped"]["malformed_json"] == 3
    assert docs["in"] == docs["kept"] + sum(docs["dropped"].values()) and docs["kept"] == 240
    assert manifest(on_ray) == manifest(local)
    assert shard_hashes(on_ray) == shard_hashes(local)
    assert len([f for f in shard_hashes(local) if f.endswith(".mindrecord")]) == 3      # train x2 + val
    assert not (tmp_path / "cache" / "work").exists() or not any((tmp_path / "cache" / "work").iterdir())


def test_a_rerun_after_a_failed_task_redoes_only_unfinished_tasks(corpus, local, tmp_path, data_fail):
    # (the four small files are one read task, grouped: the partitioned near stage has several tasks)
    cfg = engine_cfg(tmp_path / "cache", corpus, "local", **_given_tokenizer(local))
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
    assert manifest(again, "tokenizer", "keys") == manifest(local, "tokenizer", "keys")
    assert shard_hashes(again) == shard_hashes(local)
    assert not any(work.parent.iterdir())                           # work removed once published


def test_ranks_above_0_wait_for_the_published_data_and_never_build(corpus, local, tmp_path, monkeypatch):
    import threading

    from pretrain.config.errors import PretrainDataError
    prepare_module = sys.modules["pretrain.data.prepare"]     # the module (the package exports the function)
    monkeypatch.setattr(prepare_module, "POLL_S", 0.2)
    monkeypatch.setenv("RANK_ID", "3")                     # what msrun sets on rank 3
    cfg = engine_cfg(tmp_path / "cache", corpus[:2], "local", **_given_tokenizer(local))
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
    assert manifest(got["web"]) == manifest(built)


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
