"""data.engine=ray against data.engine=local: the same kept documents and byte-identical shards, on
a corpus with exact duplicates, near duplicates and bad documents spread over several input files;
and restarts at task granularity (a failed task, a lost Ray worker).

Ray runs here as a private instance on this machine (2 CPUs, no dashboard, its files under the
test's tmp dir), started and shut down by prepare() itself.
"""
import importlib.util
import os
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


@pytest.fixture(scope="module")
def local(corpus, tmp_path_factory):
    return prepare(engine_cfg(tmp_path_factory.mktemp("local"), corpus, "local"), progress=False)["web"]


def _wait_for_cpus(port, cpus, env, timeout=180):
    """Until the cluster at 127.0.0.1:port has `cpus` CPUs (one a node here): `ray status` asked again."""
    import re
    import subprocess
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = subprocess.run(["ray", "status", f"--address=127.0.0.1:{port}"], env=env, capture_output=True,
                             text=True, timeout=60).stdout
        total = re.search(r"/(\d+(?:\.\d+)?) CPU", out)
        if total and float(total.group(1)) >= cpus:
            return
        time.sleep(0.5)
    raise AssertionError(f"the Ray cluster never had {cpus} CPUs: {out[-1000:]}")


def _ray_node(args, env, log):
    """`ray start --block ...` in its own process group (ended by that group's id, nothing else)."""
    import subprocess
    return subprocess.Popen(["ray", "start", "--block", "--num-cpus=1", *args], env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)


@pytest.mark.slow
def test_a_two_node_ray_cluster_on_this_machine_gives_the_local_bytes(corpus, local, ray_tmp, tmp_path,
                                                                     monkeypatch):
    """`ray start --head` and `ray start --address=...`, one CPU each; prepare() joins the cluster at
    data.ray.address. The second node is stopped mid-job: the job finishes on the first."""
    import signal
    import socket
    import subprocess
    import threading
    import time
    from contextlib import suppress
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # A cluster bound to 127.0.0.1 for this test: no token (Ray >= 2.5x enables token auth by default).
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    env = {**os.environ, "RAY_TMPDIR": str(ray_tmp), "PYTHONPATH": os.getcwd()}
    log = open(tmp_path / "ray.log", "wb")
    head = ["--head", f"--port={port}", "--include-dashboard=false", "--node-ip-address=127.0.0.1"]
    nodes = [_ray_node(head, env, log)]
    try:
        _wait_for_cpus(port, 1, env)
        nodes.append(_ray_node([f"--address=127.0.0.1:{port}", "--node-ip-address=127.0.0.1"], env, log))
        _wait_for_cpus(port, 2, env)
        cfg = engine_cfg(tmp_path / "cache", corpus, "ray", **{"ray.address": f"127.0.0.1:{port}"})
        def stop_second_node():      # as the tokenize stage begins: its tasks in flight on both nodes
            while not any((tmp_path / "cache" / "work").glob("dataset-*/tokenize")):
                time.sleep(0.05)
            os.killpg(nodes[1].pid, signal.SIGKILL)
        stopper = threading.Thread(target=stop_second_node, daemon=True)
        stopper.start()
        on_cluster = prepare(cfg, progress=False)["web"]
        assert nodes[1].poll() is not None, "the second node was not stopped during the job"
        assert manifest(on_cluster) == manifest(local) and shard_hashes(on_cluster) == shard_hashes(local)
    finally:
        for p in nodes:
            with suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in nodes:
            with suppress(subprocess.TimeoutExpired):
                p.wait(15)
            with suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)   # the group: Ray's own daemons too
            p.wait(30)
        log.close()


def _given_tokenizer(local):
    """The tokenizer local trained, given by path: a run that does not train one again (faster);
    the manifest then records that path and its config hash differs, nothing else."""
    return {"tokenizer.path": str(local.tokenizer_path)}


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
