"""The safetensors format read and written with NumPy alone (no torch, no safetensors package at run time).

A file is an 8-byte little-endian header length, a JSON header {name: {dtype, shape, data_offsets}}
(plus an optional "__metadata__" of strings), then the raw little-endian tensor bytes. Reading gives
StoredTensor handles that read their bytes when load()ed (the last two loaded are kept: a MoE layer's
experts are cut one by one from the same two stacked tensors), and writing streams one tensor at a
time, so an export holds about two tensors in memory, not the checkpoint (a memory map would keep
every page it touched resident: peak RSS the size of the checkpoint). bfloat16 has no NumPy dtype:
its bytes travel as uint16 under the BF16 tag.
"""
import functools
import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterable, Optional, Tuple

import numpy as np

_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.uint16, "I64": np.int64,
           "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
_TAGS = {np.dtype(v): k for k, v in _DTYPES.items() if k != "BF16"}


class SafetensorsError(ValueError):
    """The file is not a readable safetensors file (the message says which and why)."""


def read_header(path: Path) -> Tuple[Dict[str, dict], int]:
    """(header without __metadata__, offset of the data section)."""
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise SafetensorsError(f"{path}: shorter than a safetensors header")
        (size,) = struct.unpack("<Q", raw)
        if size > 100 << 20:
            raise SafetensorsError(f"{path}: header of {size} bytes: not a safetensors file")
        try:
            header = json.loads(f.read(size))
        except ValueError as e:
            raise SafetensorsError(f"{path}: header is not JSON ({e})") from None
    header.pop("__metadata__", None)
    return header, 8 + size


@dataclass(frozen=True)
class StoredTensor:
    path: Path
    offset: int                  # of its first byte in the file
    shape: Tuple[int, ...]
    tag: str

    def load(self) -> np.ndarray:
        return _load(self)


@functools.lru_cache(maxsize=2)
def _load(t: StoredTensor) -> np.ndarray:
    count = int(np.prod(t.shape, dtype=np.int64))
    array = np.fromfile(t.path, dtype=_DTYPES[t.tag], count=count, offset=t.offset)
    if array.size != count:
        raise SafetensorsError(f"{t.path}: a tensor runs past the end of the file (truncated)")
    array.flags.writeable = False   # shared by the cache: nobody may change it in place
    return array.reshape(t.shape)


def read(path: Path, only: Optional[Callable[[str], bool]] = None) -> Dict[str, StoredTensor]:
    """{name: StoredTensor} of the file's tensors (those `only` accepts); nothing loaded yet."""
    path = Path(path)
    header, start = read_header(path)
    size = path.stat().st_size
    out = {}
    for name, entry in header.items():
        if only is not None and not only(name):
            continue
        tag = entry["dtype"]
        if tag not in _DTYPES:
            raise SafetensorsError(f"{path}: tensor {name!r} has dtype {tag}, which this reader does not "
                                   f"know")
        begin, end = entry["data_offsets"]
        if start + end > size:
            raise SafetensorsError(f"{path}: tensor {name!r} runs past the end of the file (truncated)")
        out[name] = StoredTensor(path, start + begin, tuple(int(d) for d in entry["shape"]), tag)
    return out


def tag_of(array: np.ndarray, bf16: bool = False) -> str:
    return "BF16" if bf16 else _TAGS[array.dtype]


def write(path: Path, tensors: Iterable[Tuple[str, str, Tuple[int, ...], Callable[[], np.ndarray]]],
          metadata: Optional[Dict[str, str]] = None) -> int:
    """Write (name, dtype tag, shape, make) tensors, calling make() for one tensor at a time; returns
    the bytes of tensor data written. The header is computed from the shapes first, so nothing is
    buffered."""
    items = list(tensors)
    header: Dict[str, dict] = {"__metadata__": dict(metadata or {"format": "pt"})}
    offset = 0
    for name, tag, shape, _ in items:
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(_DTYPES[tag]).itemsize
        header[name] = {"dtype": tag, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)   # the data section starts 8-byte aligned, as the format asks
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for name, tag, shape, make in items:
            array = np.ascontiguousarray(make())
            if tuple(array.shape) != tuple(shape) or array.dtype != np.dtype(_DTYPES[tag]):
                raise SafetensorsError(f"{name}: made {array.dtype}{array.shape}, declared "
                                       f"{tag}{tuple(shape)}")
            f.write(memoryview(array.astype(array.dtype.newbyteorder("<"), copy=False)).cast("B"))
    return offset
