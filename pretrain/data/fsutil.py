"""Atomic publication of whole files and directories (on top of pretrain.io's write_atomic).

A prepared dataset is a directory of shards plus a manifest; it is built under a temp name and
renamed into place in one step, so a reader sees either nothing or the complete dataset.
"""
import io
import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from pretrain.io import fsync_dir, write_atomic


def write_json_atomic(path: Path, obj: Any) -> None:
    write_atomic(path, json.dumps(obj, indent=1, sort_keys=True) + "\n")


def save_npy_atomic(path: Path, array: np.ndarray) -> None:
    buf = io.BytesIO()
    np.save(buf, array)
    write_atomic(path, buf.getvalue())


def temp_dir_for(final: Path) -> Path:
    """A fresh sibling directory to build `final` in, private to this process."""
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def publish_dir(tmp: Path, final: Path) -> None:
    """Rename a finished temp directory into place.

    Files written by C++ writers (MindRecord) are fsynced here first. If another process
    published the same content-addressed directory meanwhile, theirs is kept and ours dropped."""
    for p in tmp.iterdir():
        if p.is_file():
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    fsync_dir(tmp)
    try:
        os.replace(tmp, final)
    except OSError:
        if not final.is_dir():
            raise
        shutil.rmtree(tmp, ignore_errors=True)
    fsync_dir(final.parent)
