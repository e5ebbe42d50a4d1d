"""Ranks, and what a launch set up, do not outlive their launcher.

msrun's workers run in sessions of their own (setsid), and the launcher runs msrun in a session of
its own, so a kill -9 of the launcher (or of a job controller) leaves msrun and every rank
training unsupervised, holding the run directory's lock. A launcher names itself in
LAUNCHER_ENV; each rank watches that process (wait_gone: a pidfd, Linux >= 5.3; else its /proc
entry) and when it is gone stops as on SIGTERM: every rank at the same step, checkpointed, exit 0.
A rank that cannot get there within the grace (stuck in a collective whose peer already left)
exits 75. The job controller's network namespaces are removed by the same watch, from a process
of their own (pretrain.launch.netns.Janitor), once the ranks inside have stopped.
"""
import os
import select
import signal
import sys
import threading
import time

LAUNCHER_ENV = "PRETRAIN_LAUNCHER_PID"
ORPHAN_EXIT = 75
POLL_S = 1.0


def stop_with_launcher(grace_s: float) -> None:
    """Watch the launcher named in LAUNCHER_ENV (nothing to do without one: a rank started by hand)."""
    pid = int(os.environ.get(LAUNCHER_ENV, "0") or 0)
    if pid <= 0:
        return
    threading.Thread(target=_watch, args=(pid, grace_s), name="launcher-watch", daemon=True).start()


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def wait_gone(pid: int) -> None:
    """Return once process `pid` has ended (at once when there is none)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except (AttributeError, OSError):   # no pidfd: its /proc entry, polled
        while not _gone(pid):
            time.sleep(POLL_S)
        return
    try:
        select.select([fd], [], [])   # readable once the process ends
    finally:
        os.close(fd)


def _watch(pid: int, grace_s: float) -> None:
    wait_gone(pid)
    print(f"launcher (pid {pid}) is gone: this rank checkpoints at the next step and stops",
          file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(grace_s)
    print(f"launcher gone and no stop within {grace_s:.0f} s: exiting", file=sys.stderr, flush=True)
    os._exit(ORPHAN_EXIT)
