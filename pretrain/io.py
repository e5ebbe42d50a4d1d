"""Durable file writes: nothing half-written is ever taken for a good file."""
import os
from pathlib import Path
from typing import Union


def fsync_path(path: Union[str, Path]) -> None:
    """Flush a file (its bytes) or a directory (its entries: a rename or a new file in it) to disk."""
    fd = os.open(str(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Union[str, Path], data: Union[str, bytes]) -> None:
    """Write to a temp file beside `path`, fsync, rename over it, fsync the directory."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as fh:
        fh.write(data.encode() if isinstance(data, str) else data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_path(path.parent)
