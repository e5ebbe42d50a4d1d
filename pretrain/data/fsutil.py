"""Atomic publication of whole files and directories (on top of pretrain.io's write_atomic).

A prepared dataset is a directory of shards plus a manifest; it is built under a temp name and
renamed into place in one step, so a reader sees either nothing or the complete dataset.
"""
import io
import json
import os
import re
import shutil
import socket
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Iterator, List

import numpy as np

from pretrain.io import fsync_path, write_atomic


def write_json_atomic(path: Path, obj: Any) -> None:
    write_atomic(path, json.dumps(obj, indent=1, sort_keys=True) + "\n")


def save_npy_atomic(path: Path, array: np.ndarray) -> bytes:
    """The file's bytes, as written (a caller checksums them)."""
    buf = io.BytesIO()
    np.save(buf, array)
    data = buf.getvalue()
    write_atomic(path, data)
    return data


# A build's temp directory is named after its owner, `.<final>.tmp-<host>-<pid>`, so a later run
# can tell a live build (another process preparing the same cache right now) from one that a
# kill -9 or a power loss left behind. Only this host's dead owners are swept: a pid says
# nothing about a process on another host that shares the cache.
_HOST = re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname()) or "host"
_TEMP = re.compile(r"^\.(?P<name>.+)\.tmp-(?:(?P<host>[A-Za-z0-9._]+)-)?(?P<pid>\d+)$")


def temp_dir_for(final: Path) -> Path:
    """A fresh sibling directory to build `final` in, private to this process."""
    tmp = final.with_name(f".{final.name}.tmp-{_HOST}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


@contextmanager
def building(final: Path) -> Iterator[Path]:
    """`with building(final) as tmp: ...write into tmp...`; published as `final` when the block
    ends, removed whatever stops it (an error, an interrupt): no temp directory outlives its build."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_dir_for(final)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    publish_dir(tmp, final)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:      # someone else's live process
        return True
    return True


def sweep_stale(*directories: Path) -> List[Path]:
    """Remove temp directories and files in `directories` whose owner on this host is dead
    (what a kill -9 leaves behind); what they were building is simply built again. Returns
    what was removed."""
    removed = []
    for d in directories:
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            m = _TEMP.match(e.name)
            if not m or (m["host"] or _HOST) != _HOST or _alive(int(m["pid"])):
                continue
            if e.is_dir(follow_symlinks=False):
                shutil.rmtree(e.path, ignore_errors=True)
            else:
                with suppress(OSError):
                    os.unlink(e.path)
            removed.append(Path(e.path))
    return removed


def publish_dir(tmp: Path, final: Path) -> None:
    """Rename a finished temp directory into place.

    Files written by C++ writers (MindRecord) are fsynced here first. If another process
    published the same content-addressed directory meanwhile, theirs is kept and ours dropped."""
    for p in tmp.iterdir():
        if p.is_file():
            fsync_path(p)
    fsync_path(tmp)
    try:
        os.replace(tmp, final)
    except OSError:
        if not final.is_dir():
            raise
        shutil.rmtree(tmp, ignore_errors=True)
    fsync_path(final.parent)
