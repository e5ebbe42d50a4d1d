"""Issue 12 item 2 under msrun: the launcher holds the run dir's lock for the whole launch, and msrun
inherits it, so ranks orphaned by a kill -9 of the launcher still keep a second run out."""
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from test_launch_msrun import DP2, SMALL, wait_for_steps

from pretrain.rundir import RunDirBusy, RunDirLock
from tests.helpers import cli
from tests.helpers.net import free_port

pytestmark = pytest.mark.slow

RUN = Path("runs") / "tiny-dp2-cpu_2proc"


def test_a_second_launch_is_refused_while_msrun_runs_even_after_its_launcher_was_killed(data_cache,
                                                                                         tmp_path):
    args = [*DP2, *SMALL, f"hardware.master_port={free_port()}", "phase=general",
            "train.total_tokens=20480"]   # 28 steps
    run = tmp_path / RUN
    launcher = cli.start(*args, cwd=tmp_path, cache=data_cache, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
    try:
        wait_for_steps(launcher, run, 3)
        second = cli.run(*args, cwd=tmp_path, cache=data_cache, timeout=120)
        assert second.returncode == 2 and f"is in use by pid {launcher.pid} on host" in second.stderr

        launcher.kill()   # the launcher alone: msrun and its ranks (own sessions) train on
        launcher.wait()
        ranks = [int(p.read_text()) for p in (run / "logs").glob("rank_*.pid")]
        assert ranks and all(os.path.exists(f"/proc/{pid}") for pid in ranks)
        third = cli.run(*args, cwd=tmp_path, cache=data_cache, timeout=120)
        assert third.returncode == 2, third.stderr[-2000:]
        assert f"in use by pid {launcher.pid} on host" in third.stderr
        assert "still holds the lock" in third.stderr
    finally:
        if launcher.poll() is None:
            launcher.kill()
        for pid_file in (run / "logs").glob("rank_*.pid"):
            try:
                os.killpg(int(pid_file.read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
    deadline = time.time() + 180   # the ranks are gone: msrun exits, and the lock with it
    while True:
        try:
            RunDirLock(run).acquire().release()
            break
        except RunDirBusy:
            assert time.time() < deadline, "the lock outlived msrun"
            time.sleep(1)
