"""Write a Hugging Face model directory, all or nothing.

Everything goes into a hidden temporary directory beside the target, is fsynced, and is renamed onto
the target (absent, or an empty directory) at the end; an error or a Ctrl-C on the way removes the
temporary directory, so the target is never left half-written. Weights: one model.safetensors, or
model-0000i-of-0000n.safetensors shards of at most max_shard_bytes with model.safetensors.index.json
(what transformers' save_pretrained writes and from_pretrained / vLLM read).
"""
import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Dict, List

import numpy as np

from pretrain.config.errors import PretrainRunError
from pretrain.export import safetensors_file
from pretrain.export.names import HFTensor
from pretrain.io import fsync_path

DTYPES = {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}


def check_target(target: Path) -> None:
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        what = "is not a directory" if not target.is_dir() else "is not empty"
        raise PretrainRunError(f"--to {target}: {what}; "
                               f"choose a new directory (export never writes over files)")
    if not target.parent.is_dir():
        raise PretrainRunError(f"--to {target}: its parent directory {target.parent} does not exist")


def write(target: Path, fill: Callable[[Path], None]) -> None:
    """fill(tmp) writes the directory's files into tmp; then tmp becomes target."""
    check_target(target)
    tmp = target.parent / f".{target.name}.export-tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        fill(tmp)
        for f in tmp.iterdir():
            fsync_path(f)
        fsync_path(tmp)
        check_target(target)   # someone may have written there meanwhile
        os.replace(tmp, target)   # onto an empty directory too (POSIX rename)
        fsync_path(target.parent)
    except OSError as e:   # a full disk or a permission: one line, and nothing left behind
        shutil.rmtree(tmp, ignore_errors=True)
        raise PretrainRunError(f"--to {target}: writing failed ({e.strerror or e}); nothing was written, "
                               f"free space or choose a writable directory") from None
    except BaseException:   # a refusal raised while filling, or Ctrl-C: the same, with its own message
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def cast(array: np.ndarray, tag: str, to: str) -> np.ndarray:
    """A tensor from dtype tag `tag` to `to` (F32, BF16, F16); bfloat16 as uint16, rounded to nearest even."""
    if tag == to:
        return array
    x = (array.astype(np.uint32) << 16).view(np.float32) if tag == "BF16" else array.astype(np.float32)
    if to == "F32":
        return x
    if to == "F16":
        return x.astype(np.float16)
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), rounded)


def write_weights(out: Path, tensors: List[HFTensor], to: str, max_shard_bytes: int) -> Dict[str, Any]:
    """The safetensors shards (and their index when more than one); returns the index."""
    itemsize = np.dtype(np.float32 if to == "F32" else np.uint16).itemsize
    shards: List[List[HFTensor]] = [[]]
    size = 0
    for t in tensors:
        nbytes = int(np.prod(t.shape, dtype=np.int64)) * itemsize
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(t)
        size += nbytes
    names = (["model.safetensors"] if len(shards) == 1 else
             [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))])
    total, weight_map = 0, {}
    for name, shard in zip(names, shards):
        total += safetensors_file.write(out / name, [
            (t.name, to, t.shape, lambda t=t: cast(t.make(), t.tag, to)) for t in shard])
        weight_map.update({t.name: name for t in shard})
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    if len(shards) > 1:
        (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return index
