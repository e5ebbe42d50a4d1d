"""Issue 27's launch items, end to end with the dp2 launcher (msrun, two real CPU ranks):

- hardware.master_port taken between the launcher's check and msrun's scheduler bind: the
  scheduler dies at once; the launcher says so within seconds and retries on a free port (before:
  it printed nothing and waited for the workers' 600 s cluster timeout);
- SIGKILL of the launcher: its ranks stop by themselves, at one agreed step, checkpointed, and the
  whole tree (msrun, its scheduler, `tail -f`) ends (before: they trained on to the end as orphans).

Issue 40's, the interrupts:
- SIGTERM to every process of the launch at once (launcher, msrun, its scheduler, the ranks): a stop
  at a checkpoint, exit 0 (before: `error: rank 0 of 2 never reported an exit status ...`, exit 2,
  or msrun's traceback);
- Ctrl-C twice: the ranks killed, one line, exit 130 (before: a 52-line traceback).
"""
import json
import os
import signal
import socket
import time
from pathlib import Path

import pytest

from pretrain.launch import tree
from pretrain.resilience.orphan import LAUNCHER_ENV
from tests.helpers.net import free_port
from tests.e2e.test_launch_msrun import (DP2, RUN, SMALL, events, pretrain,  # noqa: F401 (a fixture)
                                     rank_status, train_records, wait_for_steps)

pytestmark = pytest.mark.slow


def test_a_master_port_taken_after_the_check_is_reported_and_retried_on_a_free_port(pretrain, tmp_path):
    port = free_port()
    proc = pretrain.start(*DP2, *SMALL, f"hardware.master_port={port}", "phase=general",
                          "train.total_tokens=8192")
    squatter = socket.socket()
    try:
        for line in proc.stdout:   # the check passed; msrun is starting: take its port now
            if line.startswith("launch: msrun"):
                squatter.bind(("127.0.0.1", port))
                squatter.listen()
                break
        out, err = proc.communicate(timeout=300)
    finally:
        squatter.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    assert f"msrun's scheduler on port {port} failed at once" in out and "retrying on a free port" in out
    assert f"hardware.master_port={port} is in use: this single-host job takes the free port" in out
    assert events(tmp_path / RUN, "restart") == []   # a port race spends no restart
    assert json.loads((tmp_path / RUN / "summary.json").read_text())["global_step"] == 11


def test_ranks_stop_at_a_checkpoint_when_their_launcher_is_killed(pretrain, tmp_path):
    steps = 300   # far more than the test waits for: the ranks must stop on their own
    proc = pretrain.start(*DP2, *SMALL, f"hardware.master_port={free_port()}", "phase=general",
                          f"train.total_tokens={steps * 8 * 64 * 10 // 7}")
    run = tmp_path / RUN
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if (run / "metrics.jsonl").is_file() and len(train_records(run)) >= 3:
            break
        time.sleep(0.1)
    pids = {r: int((run / "logs" / f"rank_{r}.pid").read_text()) for r in (0, 1)}
    tag = tree.tag_of(pids[0])
    assert tag, "rank 0 carries no tree tag"
    os.kill(proc.pid, signal.SIGKILL)   # the launcher alone: msrun and the ranks run in their own sessions
    proc.communicate()
    while time.time() < deadline and tree.tagged([tag]):   # msrun, its scheduler, the ranks, `tail -f`
        time.sleep(0.2)
    assert not tree.tagged([tag]), "the launch's processes outlived their launcher"
    status = rank_status(run)
    assert status[0]["exit"] == status[1]["exit"] == 0
    (stopped,) = events(run, "signal")
    k = stopped["step"]
    assert 3 <= k < steps and (run / "checkpoints" / f"step_{k:08d}").is_dir()
    assert max(r["step"] for r in train_records(run)) == k


def launch_processes(launcher: int):
    """Every process the launcher started (msrun, its scheduler, the ranks, `tail -f`): they carry its
    pid for the orphan watch."""
    mark = f"{LAUNCHER_ENV}={launcher}".encode()
    found = []
    for entry in os.scandir("/proc"):
        try:
            if entry.name.isdigit() and mark in Path(entry.path, "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return [pid for pid in found if tree.alive(pid)]


LONG = [*DP2, *SMALL, "phase=general", "train.total_tokens=280000"]   # ~380 steps: stopped long before


def test_sigterm_to_every_process_of_the_launch_at_once_is_a_stop_at_a_checkpoint(pretrain, tmp_path):
    proc = pretrain.start(*LONG, f"hardware.master_port={free_port()}")
    run = tmp_path / RUN
    wait_for_steps(proc, run, 3)
    pids = launch_processes(proc.pid)
    assert len(pids) >= 4   # msrun, its scheduler, two ranks
    for pid in [proc.pid, *pids]:
        os.kill(pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    assert "error:" not in err and "Traceback" not in err and "never reported" not in out + err
    (stopped,) = events(run, "signal")
    k = stopped["step"]
    assert (run / "checkpoints" / f"step_{k:08d}").is_dir()
    assert [rank_status(run)[r]["exit"] for r in (0, 1)] == [0, 0]
    assert f"stopped by SIGTERM after step {k}" in out or f"resumes from step {k}" in out
    assert launch_processes(proc.pid) == []


def test_ctrl_c_twice_kills_the_ranks_and_ends_in_one_line(pretrain, tmp_path):
    proc = pretrain.start(*LONG, f"hardware.master_port={free_port()}")
    run = tmp_path / RUN
    wait_for_steps(proc, run, 3)
    proc.send_signal(signal.SIGINT)
    for line in proc.stdout:   # the launcher passed it on: the ranks are stopping
        if "SIGINT: the ranks checkpoint at the next step" in line:
            break
    proc.send_signal(signal.SIGINT)   # not waiting for that
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130
    (line,) = err.splitlines()
    assert line.startswith("interrupted (SIGINT again): the ranks were killed without waiting for their "
                           "checkpoint; ")
    assert launch_processes(proc.pid) == []
