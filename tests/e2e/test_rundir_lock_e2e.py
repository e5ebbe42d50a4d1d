"""Issue 12 item 2: one run per run directory. An flock on RUN_DIR/.lock, held for the whole run,
released by the kernel when the holder dies (kill -9 leaves no stale lock); the second run gets
one line naming the holder's pid and host, exit 2."""
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from tests.helpers.rundir_fakes import SMALL, pretrain

from pretrain import rundir
from pretrain.rundir import LOCK_FILE, RunDirBusy, RunDirLock

HOLD = """
import sys, time
from pretrain.rundir import RunDirLock
RunDirLock(sys.argv[1]).acquire()
print("locked", flush=True)
time.sleep(120)
"""


def hold_in_child(run_dir):
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_kill_9_of_the_holder_leaves_no_stale_lock(tmp_path):
    run_dir = tmp_path / "run"
    proc = hold_in_child(run_dir)
    try:
        with pytest.raises(RunDirBusy, match=f"pid {proc.pid} on host"):
            RunDirLock(run_dir).acquire()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    lock = RunDirLock(run_dir).acquire()     # the kernel dropped the dead holder's lock
    assert f'"pid": {os.getpid()}' in (run_dir / LOCK_FILE).read_text()
    lock.release()


def test_a_launched_child_given_the_lock_keeps_it_after_the_launcher_lets_go(tmp_path):
    # what msrun gets (pass_fds): orphaned ranks of a killed launcher still hold the run dir
    run_dir = tmp_path / "run"
    lock = RunDirLock(run_dir).acquire()
    child = subprocess.Popen(["sleep", "60"], pass_fds=(rundir.held_fd(run_dir),))
    try:
        lock.release()
        assert rundir.held_fd(run_dir) is None
        with pytest.raises(RunDirBusy):
            RunDirLock(run_dir).acquire()
    finally:
        child.kill()
        child.wait()
    RunDirLock(run_dir).acquire().release()


def test_a_forked_helper_does_not_keep_the_lock_after_its_parent(tmp_path):
    # a data-preparation pool worker orphaned by a killed run must not block the next run
    run_dir = tmp_path / "run"
    lock = RunDirLock(run_dir).acquire()
    ready, tell = os.pipe()
    pid = os.fork()
    if pid == 0:   # the helper (at-fork hooks done) outlives the lock holder
        os.write(tell, b"x")
        time.sleep(30)
        os._exit(0)
    try:
        assert os.read(ready, 1) == b"x"
        lock.release()
        RunDirLock(run_dir).acquire().release()
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(ready)
        os.close(tell)


@pytest.mark.slow   # 2.5-4 s: the default suite keeps under 5 minutes
def test_a_second_run_in_a_locked_run_dir_is_refused_in_one_line_and_writes_nothing(tmp_path):
    run_dir = tmp_path / "run"
    proc = hold_in_child(run_dir)
    try:
        second = pretrain(tmp_path, f"run_dir={run_dir}", *SMALL)
        dry = pretrain(tmp_path, f"run_dir={run_dir}", "dry_run=true", *SMALL)
    finally:
        proc.kill()
        proc.wait()
    assert second.returncode == 2, second.stdout[-2000:] + second.stderr[-2000:]
    error, = second.stderr.strip().splitlines()
    assert error.startswith(f"error: run_dir {run_dir} is in use by pid {proc.pid} on host "
                            f"{socket.gethostname()}")
    assert not (run_dir / "config.yaml").exists() and not (run_dir / "checkpoints").exists()
    # a dry run is not blocked, and does not write where the running run keeps its truth
    assert dry.returncode == 0, dry.stderr
    assert f"written to {run_dir / 'dry_run'}" in dry.stdout
    assert (run_dir / "dry_run" / "config.yaml").is_file() and not (run_dir / "config.yaml").exists()
