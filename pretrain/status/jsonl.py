"""Random access into a run's metrics.jsonl without parsing it: a month is ~1.3 M lines (~400 MB),
and `pretrain status` answers in under a second, while the run appends to the file.

The file stays in step order (a resume or rollback cuts it back before appending: MetricsWriter.rewind),
and so in time order, so a record is found by bisecting byte offsets on its step or ts, and a curve is
drawn from records sampled at evenly spaced offsets. Each probe reads one line. A torn last line (the
writer mid-write) is skipped like a line that is not JSON."""
import json
import os
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

_CHUNK = 1 << 16


class JsonlFile:
    def __init__(self, path: Path):
        self.path = Path(path)
        self._fh = open(self.path, "rb")
        self.size = os.fstat(self._fh.fileno()).st_size   # a snapshot: what the run appends later is not read

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> "JsonlFile":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def record_after(self, offset: int) -> Tuple[Optional[Dict[str, Any]], int]:
        """The first whole record that starts at or after `offset` (a line start), and the offset after it."""
        fh = self._fh
        fh.seek(offset)
        if offset > 0:
            fh.seek(offset - 1)
            fh.readline()     # the rest of the line `offset` falls in (nothing when it is a line start)
        while fh.tell() < self.size:
            line = fh.readline()
            if not line.endswith(b"\n"):   # torn, or beyond the snapshot
                return None, self.size
            try:
                return json.loads(line), fh.tell()
            except ValueError:
                continue
        return None, self.size

    def bisect(self, key: Callable[[Dict[str, Any]], float], value: float) -> int:
        """The offset of the first record whose key is >= value (key must not decrease along the file)."""
        lo, hi = 0, self.size
        while hi - lo > 1:
            mid = (lo + hi) // 2
            rec, _ = self.record_after(mid)
            if rec is None or key(rec) >= value:
                hi = mid
            else:
                lo = mid
        if lo == 0:
            rec, _ = self.record_after(0)
            if rec is not None and key(rec) >= value:
                return 0
        return hi

    def record_at(self, step: int, kind: str = "train") -> Optional[Dict[str, Any]]:
        """The record of `kind` (train, val) at global step `step`, or None."""
        offset = self.bisect(lambda r: int(r.get("step", 0)), step)
        for _ in range(4):   # the step's other records (a val after its train) may come first
            rec, offset = self.record_after(offset)
            if rec is None or int(rec.get("step", 0)) > step:
                return None
            if rec.get("kind") == kind and int(rec["step"]) == step:
                return rec
        return None

    def sample(self, start: int, count: int, kind: str = "train") -> List[Dict[str, Any]]:
        """About `count` records of `kind` at evenly spaced offsets from `start` to the end, in order."""
        out: List[Dict[str, Any]] = []
        if count <= 0 or start >= self.size:
            return out
        stride = max(1, (self.size - start) // count)
        last_step = None
        for offset in range(start, self.size, stride):
            rec, _ = self.record_after(offset)
            if rec is None or rec.get("kind") != kind or rec.get("step") == last_step:
                continue
            out.append(rec)
            last_step = rec.get("step")
        newest = [r for r in self.tail(4) if r.get("kind") == kind]   # the curve ends where the file does
        if newest and newest[-1].get("step") != last_step:
            out.append(newest[-1])
        return out

    def tail(self, max_records: int) -> List[Dict[str, Any]]:
        """The last `max_records` records (all kinds), oldest first, reading backwards in chunks."""
        lines: List[bytes] = []
        end = self.size
        rest = b""
        while end > 0 and len(lines) <= max_records:
            begin = max(0, end - _CHUNK)
            self._fh.seek(begin)
            block = self._fh.read(end - begin) + rest
            parts = block.split(b"\n")
            if end == self.size:
                parts.pop()   # after the last newline: nothing, or a line the writer has not finished
            rest = parts[0] if begin > 0 else b""
            lines[:0] = [p for p in (parts[1:] if begin > 0 else parts) if p]
            end = begin
        return [rec for rec in _parse(lines[-max_records:])]

    def first(self) -> Optional[Dict[str, Any]]:
        return self.record_after(0)[0]


def _parse(lines: List[bytes]) -> Iterator[Dict[str, Any]]:
    for line in lines:
        try:
            yield json.loads(line)
        except ValueError:
            continue
