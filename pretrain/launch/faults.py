"""Faults injected into a running job from outside it, by the chaos benchmark (pretrain.bench.chaos)
and the node tests: a checkpoint directory on a tmpfs of its own, filled to ENOSPC; the newest
checkpoint's weights corrupted."""
import errno
import os
import subprocess
from pathlib import Path
from typing import Optional

from pretrain.resilience.checkpoint import WEIGHTS, CheckpointManager
from pretrain.rundir import MARKER

CKPT_FS_MB = 256      # the checkpoints' own tmpfs: a few of the shrunken model's (~7 MB each)
BALLAST = "ballast"   # the file that fills it


def checkpoint_fs(run_dir: Path, size_mb: int = CKPT_FS_MB) -> Path:
    """RUN_DIR/checkpoints on a tmpfs of its own (the run dir marked as ours first)."""
    ckpts = run_dir / "checkpoints"
    ckpts.mkdir(parents=True)
    (run_dir / MARKER).write_text("a pretrain run directory (made by pretrain.bench.chaos)\n")
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(ckpts)], check=True)
    return ckpts


def fill(directory: Path) -> int:
    """Write directory/ballast until its filesystem is full; the bytes written."""
    written, chunk = 0, b"\0" * (1 << 20)
    with open(directory / BALLAST, "wb", buffering=0) as fh:
        while True:
            try:
                written += fh.write(chunk)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                return written


def corrupt_newest(ckpts: Path) -> Optional[int]:
    """Flip bytes in the middle of the newest checkpoint's weights when an older one exists to fall
    back to; its step, or None (try again later)."""
    found = CheckpointManager(ckpts, keep_latest=1, writes_run_files=False).list()
    if len(found) < 2:
        return None
    weights = found[0].path / WEIGHTS
    with open(weights, "r+b") as fh:
        fh.seek(weights.stat().st_size // 2)
        block = fh.read(64)
        fh.seek(-len(block), os.SEEK_CUR)
        fh.write(bytes(b ^ 0xFF for b in block))
    return found[0].step
