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
import tempfile
from pathlib import Path
import pytest

from pretrain.data import prepare
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
        cfg = _cfg(tmp_path / "cache", corpus, "ray", **{"ray.address": f"127.0.0.1:{port}"})
        def stop_second_node():      # as the tokenize stage begins: its tasks in flight on both nodes
            while not any((tmp_path / "cache" / "work").glob("dataset-*/tokenize")):
                time.sleep(0.05)
            os.killpg(nodes[1].pid, signal.SIGKILL)
        stopper = threading.Thread(target=stop_second_node, daemon=True)
        stopper.start()
        on_cluster = prepare(cfg, progress=False)["web"]
        assert nodes[1].poll() is not None, "the second node was not stopped during the job"
        assert _manifest(on_cluster) == _manifest(local) and _files(on_cluster) == _files(local)
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
