"""data.engine=ray against data.engine=local: the same kept documents and byte-identical shards, on
a corpus with exact duplicates, near duplicates and bad documents spread over several input files;
and restarts at task granularity (a failed task, a lost Ray worker).

Ray runs here as a private instance on this machine (2 CPUs, no dashboard, its files under the
test's tmp dir), started and shut down by prepare() itself.
"""
import importlib.util
import os
import pytest

from pretrain.data import prepare
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
