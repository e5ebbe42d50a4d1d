"""Issue 12 item 2: one run per run directory. An flock on RUN_DIR/.lock, held for the whole run,
released by the kernel when the holder dies (kill -9 leaves no stale lock); the second run gets
one line naming the holder's pid and host, exit 2."""
import os
import socket

import pytest
from pretrain.rundir import RunDirBusy, RunDirLock


def test_a_second_lock_names_the_holders_pid_and_host(tmp_path):
    with RunDirLock(tmp_path / "run"):
        with pytest.raises(RunDirBusy) as err:
            RunDirLock(tmp_path / "run").acquire()
    message = str(err.value)
    assert "\n" not in message
    assert f"pid {os.getpid()} on host {socket.gethostname()}" in message
    RunDirLock(tmp_path / "run").acquire().release()   # released on exit from the with
