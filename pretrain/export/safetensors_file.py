"""The safetensors format read and written with NumPy alone (no torch, no safetensors package at run time).

A file is an 8-byte little-endian header length, a JSON header {name: {dtype, shape, data_offsets}}
(plus an optional "__metadata__" of strings), then the raw little-endian tensor bytes. Reading maps
the file (np.memmap) so a tensor's bytes are paged in only when the export touches them: exporting
a 70B checkpoint never holds it whole in memory. Writing streams one tensor at a time for the same
reason. bfloat16 has no NumPy dtype: its bytes travel as uint16 under the BF16 tag.
"""
import json
import struct
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


def read(path: Path, only: Optional[Callable[[str], bool]] = None) -> Dict[str, Tuple[str, np.ndarray]]:
    """{name: (dtype tag, array)} of the file's tensors (those `only` accepts), as views of one
    read-only memory map of the file."""
    path = Path(path)
    header, start = read_header(path)
    data = np.memmap(path, dtype=np.uint8, mode="r")
    out = {}
    for name, entry in header.items():
        if only is not None and not only(name):
            continue
        tag = entry["dtype"]
        if tag not in _DTYPES:
            raise SafetensorsError(f"{path}: tensor {name!r} has dtype {tag}, which this reader does not "
                                   f"know")
        begin, end = entry["data_offsets"]
        if start + end > data.size:
            raise SafetensorsError(f"{path}: tensor {name!r} runs past the end of the file (truncated)")
        array = data[start + begin:start + end].view(_DTYPES[tag]).reshape(entry["shape"])
        out[name] = (tag, array)
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
