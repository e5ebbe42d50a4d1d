"""GracefulStop with real signals; Watchdog in subprocesses (it ends its process on purpose)."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from pretrain.resilience.signals import HANG_EXIT_CODE, STATUS_ENV
from tests.helpers.repo import REPO


LOOP = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {repo!r})
    from pretrain.resilience.signals import GracefulStop
    with GracefulStop() as stop:
        for step in range(1, 10000):
            print("begin", step, flush=True)
            time.sleep(0.05)                 # the step; a signal arrives during it
            print("end", step, flush=True)
            if stop.requested:
                print("stopped by", stop.signal_name, "after step", step, flush=True)
                break
""")


def test_sigterm_mid_step_finishes_the_step_and_exits_cleanly():
    script = LOOP.format(repo=str(REPO))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line.strip())
        if line.startswith("begin 3"):
            proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert lines[-3:] == ["begin 3", "end 3", "stopped by SIGTERM after step 3"]


HANG = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {repo!r})
    from pretrain.resilience.events import EventLog
    from pretrain.resilience.signals import Watchdog

    def hanging_step():
        time.sleep(60)

    def gil_holding_step():
        sum(range(10 ** 13))                 # one C call that never lets the watchdog thread run

    # The margins are wide (a loaded machine may wake a sleeper late): 1 s sleeps against 0.5 s, each
    # within an allowance of 6 s; the quick steps beat back to back.
    dog = Watchdog(0.5, first_timeout_s=6.0, stacks_path={stacks!r}, events=EventLog({events!r}),
                   backstop_s=1.0)
    with dog:
        time.sleep(1.0)                      # "compile": longer than timeout_s, within first_timeout_s
        dog.beat(step=1, next_timeout_s=6.0)
        time.sleep(1.0)                      # a known-slow step (a save) announced in advance
        for step in (2, 3):
            dog.beat(step=step)
        {hang}()
""")


def run_hang(tmp_path, hang):
    stacks, events = tmp_path / "stacks.txt", tmp_path / "events.jsonl"
    script = HANG.format(repo=str(REPO), stacks=str(stacks), events=str(events), hang=hang)
    started = time.monotonic()
    env = {**os.environ, STATUS_ENV: str(tmp_path / "rank_0.exit"), "RANK_ID": "0"}   # as pretrain.worker sets it
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
    return out, time.monotonic() - started, stacks, events


@pytest.mark.slow   # 2.5-4 s: the default suite keeps under 5 minutes
def test_watchdog_ends_a_hung_step_with_its_exit_code_and_stacks(tmp_path):
    out, elapsed, stacks, events = run_hang(tmp_path, "hanging_step")
    assert out.returncode == HANG_EXIT_CODE, out.stderr[-2000:]
    assert elapsed < 20
    assert "watchdog: the step after step 3 has not finished" in out.stderr
    assert "in hanging_step" in out.stderr and "in hanging_step" in stacks.read_text()
    hang, = [json.loads(line) for line in events.read_text().splitlines()]
    assert hang["kind"] == "hang" and hang["last_step"] == 3 and hang["exit_code"] == HANG_EXIT_CODE
    # os._exit skips the worker's own report: the watchdog leaves the rank's exit status for the launcher
    status = json.loads((tmp_path / "rank_0.exit").read_text())
    assert status["rank"] == 0 and status["exit"] == HANG_EXIT_CODE
    assert status["error"].startswith("watchdog: the step after step 3 has not finished")


@pytest.mark.slow   # 2.5-4 s: the default suite keeps under 5 minutes
def test_watchdog_backstop_fires_when_the_hang_holds_the_gil(tmp_path):
    out, elapsed, stacks, events = run_hang(tmp_path, "gil_holding_step")
    assert out.returncode == 1 and elapsed < 20
    assert "in gil_holding_step" in out.stderr
    assert not stacks.exists() and (not events.exists() or events.read_text() == "")
