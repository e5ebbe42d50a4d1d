"""The cleaned, deduplicated documents of one source, on disk between the stages.

Layout (a directory): docs.txt holds the UTF-8 texts back to back, docs.end the int64 end
offset of each, docs.val one byte per document (1 = held out). Written streaming; read by index
range, so tokenizer workers each open it and read only their own chunk (no texts are pickled
between processes).
"""
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

import numpy as np

CHUNK_BYTES = 1 << 19     # work unit of the tokenize stage; fixed, so output never depends on workers


class DocStoreWriter:
    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._txt = open(directory / "docs.txt", "wb")
        self._end = open(directory / "docs.end", "wb")
        self._val = open(directory / "docs.val", "wb")
        self._pos = 0
        self._ends: List[int] = []
        self._flags = bytearray()

    def add(self, text: str, held_out: bool) -> None:
        data = text.encode()
        self._txt.write(data)
        self._pos += len(data)
        self._ends.append(self._pos)
        self._flags.append(1 if held_out else 0)
        if len(self._ends) >= 4096:
            self._flush()

    def _flush(self) -> None:
        np.asarray(self._ends, dtype=np.int64).tofile(self._end)
        self._val.write(self._flags)
        self._ends, self._flags = [], bytearray()

    def close(self) -> None:
        self._flush()
        for f in (self._txt, self._end, self._val):
            f.close()


class DocStore:
    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)
        self.ends = np.fromfile(self.dir / "docs.end", dtype=np.int64)
        self.held_out = np.fromfile(self.dir / "docs.val", dtype=np.uint8).astype(bool)

    def __len__(self) -> int:
        return len(self.ends)

    def texts(self, start: int, stop: int) -> List[str]:
        if stop <= start:
            return []
        lo = int(self.ends[start - 1]) if start else 0
        with open(self.dir / "docs.txt", "rb") as f:
            f.seek(lo)
            blob = f.read(int(self.ends[stop - 1]) - lo)
        cuts = (self.ends[start:stop] - lo).tolist()
        out, prev = [], 0
        for c in cuts:
            out.append(blob[prev:c].decode())
            prev = c
        return out

    def chunks(self, chunk_bytes: Optional[int] = None) -> List[Tuple[int, int]]:
        """Consecutive (start, stop) document ranges of about chunk_bytes each."""
        chunk_bytes = chunk_bytes or CHUNK_BYTES
        if not len(self):
            return []
        cuts = np.arange(chunk_bytes, int(self.ends[-1]), chunk_bytes)
        marks = np.searchsorted(self.ends, cuts, side="left")
        bounds = sorted(set([0] + (marks + 1).tolist() + [len(self)]))
        bounds = [b for b in bounds if b <= len(self)]
        return list(zip(bounds[:-1], bounds[1:]))

    def iter_texts(self, held_out: bool) -> Iterator[str]:
        for start, stop in self.chunks():
            flags = self.held_out[start:stop]
            for text, flag in zip(self.texts(start, stop), flags):
                if flag == held_out:
                    yield text
