"""One run per run directory: an OS lock on RUN_DIR/.lock, held for the whole run.

Two runs in one directory both start at step 0, delete each other's in-progress saves and write
duplicate steps into metrics.jsonl. So the process that trains (the in-process run, or the msrun
launcher for the whole launch) holds an exclusive flock on RUN_DIR/.lock. The kernel releases it
when the holder dies, however it dies, so a kill -9 leaves no stale lock; the file itself stays
(pid and host of the last holder, for the error the next contender prints). Ranks never lock:
they run under their launcher's lock, which msrun inherits (held_fd) so orphaned ranks still hold
it after a kill -9 of the launcher; forked helpers do not inherit it.

A run dir is ours only when it is new, empty or carries our marker RUN_DIR/.pretrain-run (written
when a command first takes it): anything else may be someone's files, which a run would overwrite
(config.yaml, metrics.jsonl, plan.json, summary.json, loss_curve.png, checkpoints/), so it is
refused before a byte is written or moved. A run dir an earlier pretrain made (before the marker)
is recognised by its frozen config.yaml, a mapping with every top-level key our config has, and
marked.
"""
import fcntl
import json
import os
import socket
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, Optional, Union

import yaml

from pretrain.config import frozen
from pretrain.config.errors import PretrainRunError
from pretrain.io import write_atomic
from pretrain.resilience.checkpoint import QUARANTINE

LOCK_FILE = ".lock"
DRY_RUN_DIR = "dry_run"     # where a dry run on a directory that holds a run writes its config and plan
MARKER = ".pretrain-run"    # this directory is a pretrain run dir
# Hydra's own output dir of an earlier pretrain (it wrote .hydra/ into run_dir before any check ran)
_NOT_FILES = {".hydra", LOCK_FILE}
# what a frozen config.yaml of any pretrain version has at its top level
_FROZEN_KEYS = {"run_dir", "model", "parallel", "phase", "hardware", "data", "train", "resilience"}

_held: Dict[str, int] = {}  # resolved run dir -> fd of the lock this process holds


def _close_in_forked_child() -> None:
    # A forked helper (a data-preparation pool worker) must not keep the run dir locked after the
    # run is gone; closing the child's copy leaves the parent's lock in place. (subprocess with
    # pass_fds, how msrun gets the lock on purpose, does not run these hooks.)
    for fd in _held.values():
        try:
            os.close(fd)
        except OSError:
            pass
    _held.clear()


os.register_at_fork(after_in_child=_close_in_forked_child)


class RunDirBusy(PretrainRunError):
    """Another process holds the run directory's lock."""


class RunDirLock:
    def __init__(self, run_dir: Union[str, os.PathLike]):
        self.run_dir = Path(run_dir)
        self.fd: Optional[int] = None

    def acquire(self) -> "RunDirLock":
        claim(self.run_dir)
        path = self.run_dir / LOCK_FILE
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)   # O_CLOEXEC: children only by held_fd
        except OSError as e:
            raise not_writable(self.run_dir, e) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _describe(fd)
            os.close(fd)
            raise RunDirBusy(f"run_dir {self.run_dir} is in use by {holder}: one run per run directory; "
                             f"wait for it to end (or stop it), or use another run_dir") from None
        except OSError as e:
            os.close(fd)
            raise PretrainRunError(f"cannot lock {path} ({e.strerror}): run_dir must be on a file system "
                                   f"with flock support") from None
        me = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(me) + "\n").encode(), 0)
        except OSError as e:
            os.close(fd)
            raise not_writable(self.run_dir, e) from None
        self.fd = fd
        _held[str(self.run_dir.resolve())] = fd
        try:
            probe_writable(self.run_dir)
        except PretrainRunError:
            self.release()
            raise
        return self

    def release(self) -> None:
        if self.fd is not None:
            _held.pop(str(self.run_dir.resolve()), None)
            os.close(self.fd)   # closing the last descriptor of the open file releases the flock
            self.fd = None

    def __enter__(self) -> "RunDirLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def held_fd(run_dir: Union[str, os.PathLike]) -> Optional[int]:
    """The lock's descriptor when this process holds run_dir's lock (for a launcher's children)."""
    return _held.get(str(Path(run_dir).resolve()))


def holds_run(run_dir: Union[str, os.PathLike]) -> bool:
    """Checkpoints (or quarantined ones) are there: its config.yaml and plan.json are what they
    were made with, so only an accepted run may replace them."""
    ckpt = Path(run_dir) / "checkpoints"
    try:
        return ckpt.is_dir() and any(e.name.startswith("step_") or e.name == QUARANTINE
                                     for e in ckpt.iterdir())
    except OSError:
        return False


def claim(run_dir: Path) -> None:
    """run_dir as our directory (created, or marked): one line, before anything is written or
    moved there, when it holds files pretrain did not make."""
    ensure_dir(run_dir)
    marker = run_dir / MARKER
    if marker.is_file():
        return
    try:
        entries = sorted(os.listdir(run_dir))
    except OSError as e:
        raise not_writable(run_dir, e) from None
    if set(entries) - _NOT_FILES and not made_by_pretrain(run_dir):
        shown = ", ".join(entries[:4]) + (f" and {len(entries) - 4} more" if len(entries) > 4 else "")
        raise PretrainRunError(f"run_dir {run_dir} is not empty and not a pretrain run dir (it holds "
                               f"{shown}, and no {MARKER}): a run would overwrite files there; choose a new or empty "
                               f"run_dir, or `touch {marker}` to let pretrain use this one")
    try:
        marker.write_text("a pretrain run directory: its config.yaml, checkpoints and logs are pretrain's\n")
    except OSError as e:
        raise not_writable(run_dir, e) from None


def made_by_pretrain(run_dir: Path) -> bool:
    """A run dir of an earlier pretrain, before the marker: its frozen config.yaml."""
    try:
        frozen = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    return isinstance(frozen, dict) and _FROZEN_KEYS <= set(frozen)


def ensure_dir(run_dir: Path) -> None:
    """run_dir and run_dir/checkpoints as directories, or one line saying what is in the way."""
    for path in (run_dir, run_dir / "checkpoints"):
        if path.exists() and not path.is_dir():
            raise PretrainRunError(f"{path} is a file, not a directory: move it away or choose another "
                                   f"run_dir")
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise not_writable(run_dir, e) from None


def probe_writable(run_dir: Path) -> None:
    """A file made and removed in run_dir. The existing lock and marker of an earlier run say nothing of
    whether new files can be made there (a directory made read-only since): found out later, it would be
    after the data build, a minute or more into the launch."""
    try:
        fd, name = tempfile.mkstemp(prefix=".writable-", dir=run_dir)
        os.close(fd)
        os.unlink(name)
    except OSError as e:
        raise not_writable(run_dir, e) from None


def not_writable(run_dir: Path, e: OSError) -> PretrainRunError:
    return PretrainRunError(f"run_dir {run_dir} is not writable ({e.strerror}: {e.filename}): the run "
                            f"writes its config, checkpoints and logs there; fix its permissions or choose "
                            f"another run_dir")


def freeze(run: Any, where: Path) -> Path:
    """The resolved config every rank reads (no Hydra in the ranks) and the plan beside it
    (`run`: a planned pretrain.config.resolved.ResolvedRun)."""
    try:
        where.mkdir(parents=True, exist_ok=True)
        note = frozen.keep_hand_edit(where / "config.yaml", run.cfg)   # not replaced silently
        if note:
            print(note, flush=True)
        write_atomic(where / "config.yaml", frozen.text(run.cfg))
        write_atomic(where / "plan.json", json.dumps(run.plan.to_dict(), indent=2, default=str))
    except OSError as e:
        raise not_writable(where, e) from None
    return where


def _describe(fd: int) -> str:
    try:
        holder = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except (OSError, ValueError):
        holder = {}
    if not holder.get("pid"):
        return "another process (it has not written its pid yet)"
    who = f"pid {holder['pid']} on host {holder.get('host', '?')} (since {holder.get('since', '?')})"
    if holder.get("host") == socket.gethostname() and not _alive(int(holder["pid"])):
        who += ", which has exited: a process it started (msrun and its ranks) still holds the lock"
    return who


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # another user's process
        return True
    return True
