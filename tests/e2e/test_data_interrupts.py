"""Interrupting data preparation: SIGINT (Ctrl-C) and SIGTERM stop it cleanly; kill -9 is swept.

Reproduces issue 12 item 5. Before: SIGTERM exited 143 silently, left the worker processes
running and a temp dir in the cache; Ctrl-C printed a long traceback (from the parent and each
worker). Now: workers gone, temp dirs gone, one line on stderr, exit 130 / 143; a temp dir a
kill -9 left behind is removed by the next run, one that a live process owns is not.

Each test starts a real preparation in a subprocess (its own session, like a job) whose tasks of one
stage are held (tests/sitehooks: a held task waits inside its temp dir until a signal ends it), waits
until both pool workers hold one, then signals it: the work cannot finish first, however loaded the
machine. Processes are found in /proc.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from pretrain.data.fsutil import _HOST, sweep_stale
from tests.helpers.data_cli import cli_data
from tests.helpers.data_files import paragraphs

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """~8 MB of jsonl: near-dedup of it takes several seconds on 2 cores."""
    d = tmp_path_factory.mktemp("corpus")
    rng = np.random.default_rng(0)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocab = np.array(["".join(rng.choice(letters, rng.integers(2, 9))) for _ in range(5000)])
    for k in range(4):
        with open(d / f"part{k}.jsonl", "w") as f:
            while f.tell() < 2 * 2**20:
                words = vocab[rng.integers(0, len(vocab), (200, 150))]
                f.write("".join(json.dumps({"text": " ".join(w) + "."}) + "\n" for w in words))
    return d


def _stat(pid: int):
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return rest[0], int(rest[1])            # state, parent pid
    except (OSError, IndexError):
        return None


def workers_of(pid: int):
    """Pool worker processes (spawned `multiprocessing` children) of pid."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(int(entry))
            if st and st[1] == pid:
                try:
                    cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
                except OSError:
                    continue
                if b"spawn_main" in cmd:
                    out.append(int(entry))
    return out


def alive(pids):
    return [p for p in pids if (_stat(p) or ("Z",))[0] != "Z"]


def temp_dirs(cache: Path, stage: str = "*"):
    return sorted(cache.glob(f"{stage}/.*tmp*"))


def start(tmp_path, corpus, cache, *extra, module="pretrain.data", workers=2, hold=None):
    """The preparation in a subprocess; `hold` ("<stage>/<task glob>") holds those tasks (sitehooks)."""
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    if hold:
        (tmp_path / "holds").mkdir(exist_ok=True)
        env.update(PRETRAIN_TEST_HOLD=hold, PRETRAIN_TEST_HOLD_DIR=str(tmp_path / "holds"))
    args = [sys.executable, "-m", module, "data=files", f"data.sources.general.paths=[{corpus}]",
            f"data.cache_dir={cache}", f"data.workers={workers}", *extra]
    if module == "pretrain.data":
        args += ["~data.sources.reasoning", "~data.sources.anneal", "data.tokenizer.vocab_size=400",
                 "data.tokenizer.byte_fallback=false", "model.seq_length=64"]
    else:
        args += [f"data.sources.reasoning.paths=[{corpus}]", f"data.sources.anneal.paths=[{corpus}]",
                 f"run_dir={tmp_path / 'run'}"]
    return subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def wait_for_workers(proc, cache, stage, timeout=300):
    """The worker pids once both workers hold a task (start(hold=...)) and the stage's temp dir exists."""
    holds = cache.parent / "holds"
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise AssertionError(f"finished before it could be interrupted: {proc.communicate()}")
        kids = workers_of(proc.pid)
        held = {int(m.name.split("-")[0]) for m in holds.iterdir()}
        if len(kids) >= 2 and set(kids) <= held and temp_dirs(cache, stage):
            return kids
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError(f"no held workers / temp dir appeared: {proc.communicate()}")


def finish(proc, kids):
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    deadline = time.time() + 5
    while alive(kids) and time.time() < deadline:
        time.sleep(0.1)
    return err


def check_stopped(proc, kids, cache, signum):
    err = finish(proc, kids)
    assert proc.returncode == 128 + signum, err[-3000:]
    assert err.splitlines() == [err.strip()]
    assert err.startswith(f"interrupted ({signal.Signals(signum).name}): ")
    assert "Traceback" not in err
    assert alive(kids) == []
    assert temp_dirs(cache) == []


@pytest.mark.parametrize("signum, to_group", [(signal.SIGINT, True), (signal.SIGTERM, False)],
                         ids=["ctrl-c-to-the-group", "sigterm-to-the-parent"])
def test_interrupt_while_cleaning(tmp_path, corpus, signum, to_group):
    cache = tmp_path / "cache"
    proc = start(tmp_path, corpus, cache, hold="read/*")
    kids = wait_for_workers(proc, cache, "clean")
    (os.killpg if to_group else os.kill)(proc.pid, signum)
    check_stopped(proc, kids, cache, signum)


@pytest.mark.slow   # 2.5-4 s: the default suite keeps under 5 minutes
def test_sigint_while_tokenizing_and_writing_shards(tmp_path, corpus):
    cache = tmp_path / "cache"
    proc = start(tmp_path, corpus, cache, "data.dedup.near=false", "data.tokenizer.train_sentences=2000",
                 hold="tokenize/*")
    kids = wait_for_workers(proc, cache, "datasets")
    os.kill(proc.pid, signal.SIGINT)
    check_stopped(proc, kids, cache, signal.SIGINT)
    assert list((cache / "clean").iterdir()) and list((cache / "tokenizers").iterdir())   # finished: kept


def test_sigterm_during_the_preparation_inside_python_m_pretrain(tmp_path, corpus):
    cache = tmp_path / "cache"
    proc = start(tmp_path, corpus, cache, module="pretrain", hold="read/*")
    kids = wait_for_workers(proc, cache, "clean")
    os.kill(proc.pid, signal.SIGTERM)
    check_stopped(proc, kids, cache, signal.SIGTERM)


def test_kill_9_leaves_no_workers_and_its_temp_dir_is_swept_unless_live(tmp_path, corpus):
    cache = tmp_path / "cache"
    proc = start(tmp_path, corpus, cache, hold="read/*")
    kids = wait_for_workers(proc, cache, "clean")
    os.kill(proc.pid, signal.SIGKILL)            # the parent only: its workers must not live on
    proc.communicate(timeout=60)
    deadline = time.time() + 10
    while alive(kids) and time.time() < deadline:
        time.sleep(0.1)
    stale = temp_dirs(cache, "clean")
    assert len(stale) == 1 and not alive(kids)
    # a build in progress in another live process (this one) must survive the sweep
    live = cache / "clean" / f".other-0123456789abcdef.tmp-{_HOST}-{os.getpid()}"
    live.mkdir()
    assert sweep_stale(cache / "clean") == stale
    assert temp_dirs(cache, "clean") == [live]


def test_the_next_run_sweeps_what_a_kill_9_left(tmp_path):
    cache = tmp_path / "cache"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = cache / "datasets" / f".general-0123456789abcdef.tmp-{_HOST}-{dead.pid}"
    (stale / "sub").mkdir(parents=True)
    (stale / "sub" / "big.bin").write_bytes(b"x" * 1000)
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in paragraphs()[:40]))
    proc = cli_data(tmp_path, f"data.sources.general.paths=[{src}]", cache=cache)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not stale.exists() and temp_dirs(cache) == []


def test_two_concurrent_preparations_of_one_cache_both_succeed(tmp_path):
    """Neither sweeps the other's live temp dir; the second to finish keeps the first's result."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in paragraphs()[:200]))
    cache = tmp_path / "cache"
    procs = [start(tmp_path, src, cache, workers=1) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    assert temp_dirs(cache) == [] and len(list((cache / "datasets").iterdir())) == 1
