"""A launch's whole process tree on this host, found by a tag in its environment.

msrun's workers run in sessions of their own (setsid) and survive msrun's death as orphans, so
neither a process group nor a parent chain finds all of them. Every process a launch starts
inherits TAG_ENV=<tag> (msrun passes its environment on to the scheduler, the workers and their
data workers), and /proc/<pid>/environ still shows it after any setsid or reparenting.
"""
import os
import signal
import time
import uuid
from typing import Iterable, List, Optional

TAG_ENV = "PRETRAIN_TREE_TAG"


def new_tag() -> str:
    return uuid.uuid4().hex[:12]


def _stat(pid: int) -> List[str]:
    """/proc/<pid>/stat's fields after the command name: [state, ppid, pgrp, session, tty, tpgid, flags, ...]."""
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()


def alive(pid: int) -> bool:
    """Running (a zombie that its parent has not reaped yet counts as dead)."""
    try:
        return _stat(pid)[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False
    except OSError:   # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False


# A process in the middle of exec() shows an empty /proc/<pid>/environ for about a millisecond
# (measured: up to 1.1 ms on 2 loaded cores; 24 of 300 reads right after Popen returned saw it), so
# an empty read of a live user process is read again for up to this long before it counts as untagged.
EXEC_WINDOW_S = 0.05
_PF_KTHREAD = 0x00200000   # /proc/<pid>/stat flags: a kernel thread, whose environ is always empty


def _environ(pid: int) -> bytes:
    with open(f"/proc/{pid}/environ", "rb") as fh:
        return fh.read()


def _user_process(pid: int) -> bool:
    """Alive, not a zombie and not a kernel thread."""
    try:
        fields = _stat(pid)
        return fields[0] != "Z" and not int(fields[6]) & _PF_KTHREAD
    except (OSError, IndexError, ValueError):
        return False


def environ(pid: int) -> bytes:
    """/proc/<pid>/environ, waiting out an exec() in progress (a process whose environment is
    really empty costs one EXEC_WINDOW_S)."""
    deadline = time.monotonic() + EXEC_WINDOW_S
    env = _environ(pid)
    while not env and time.monotonic() < deadline and _user_process(pid):
        time.sleep(0.001)
        env = _environ(pid)
    return env


def tag_of(pid: int) -> Optional[str]:
    """The tree tag process `pid` carries (None: none, or no such process)."""
    prefix = f"{TAG_ENV}=".encode()
    try:
        env = environ(pid).split(b"\0")
    except OSError:
        return None
    return next((e[len(prefix):].decode() for e in env if e.startswith(prefix)), None)


def tagged(tags: Iterable[str]) -> List[int]:
    """Pids of the live processes whose environment carries one of `tags`."""
    wanted = {f"{TAG_ENV}={t}".encode() for t in tags}
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            env = environ(pid).split(b"\0")
        except OSError:
            continue
        if wanted.intersection(env) and alive(pid):
            found.append(pid)
    return found


def sigkill(pid: int) -> None:
    """SIGKILL the process group `pid` leads, or the process alone when it leads none."""
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
            return
        except (ProcessLookupError, PermissionError):
            continue


def kill_tagged(tags: Iterable[str], wait_s: float = 15.0) -> List[int]:
    """SIGKILL every process carrying one of `tags` until none is left (or wait_s passed); the
    ones still alive then."""
    tags = list(tags)
    deadline = time.monotonic() + wait_s
    while True:
        left = tagged(tags)
        if not left or time.monotonic() > deadline:
            return left
        for pid in left:
            sigkill(pid)
        time.sleep(0.05)
