"""The run's events log: one JSON object per line in <run_dir>/events.jsonl.

Every event is written with a single write() and flushed at once, so a kill -9 keeps every event
logged before it (the OS holds flushed bytes even when the process dies)."""
import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Union

KINDS = frozenset({"start", "resume", "save", "prune", "spike", "rollback", "skip", "signal", "hang",
                   "finish", "fallback", "error", "quarantine", "config_change", "data_change",
                   "restart", "shrink", "requeue"})   # the last three: launch/msrun.py, launch/controller.py


class EventLog:
    def __init__(self, path: Union[str, os.PathLike]):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", buffering=1, encoding="utf-8")
        # The async checkpoint writer and the watchdog log from their own threads.
        self._lock = threading.Lock()

    def log(self, kind: str, **fields: Any) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown event kind {kind!r}; known: {sorted(KINDS)}")
        record = {"ts": time.time(), "kind": kind, **fields}
        line = json.dumps(record, default=str) + "\n"
        with self._lock:
            self._file.write(line)
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()

    def __enter__(self) -> "EventLog":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def read_events(path: Union[str, os.PathLike]) -> List[Dict[str, Any]]:
    """Every event in the file, oldest first. A torn last line (a disk that filled mid-write) is
    dropped; a malformed line anywhere else is an error, because it means the file was edited."""
    lines = Path(path).read_text(encoding="utf-8").split("\n")
    complete, tail = lines[:-1], lines[-1]
    events = [json.loads(line) for line in complete if line]
    if tail:
        try:
            events.append(json.loads(tail))
        except json.JSONDecodeError:
            pass
    return events
