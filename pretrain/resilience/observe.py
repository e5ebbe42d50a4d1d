"""A run watched from outside it, as the chaos benchmark (pretrain.bench.chaos) and the tests watch
one: its JSONL logs read while it writes them, and its goodput over the watcher's own wall."""
import json
import os
from pathlib import Path
from typing import Any, Dict, List

from pretrain.resilience import goodput
from pretrain.resilience.events import read_events


class Tail:
    """The records of a JSONL file that the run appends to (and cuts back on a resume), read
    incrementally: a poll parses only the lines added since the last one, so the benchmark's own CPU
    stays flat as the run's logs grow (parsing them whole 10x a second took ~30% of a core by 6000
    steps, CPU the measured run lost)."""

    def __init__(self, path: Path):
        self.path, self.rows, self.offset, self.last, self.inode = path, [], 0, b"", None

    def read(self) -> List[Dict[str, Any]]:
        try:
            with open(self.path, "rb") as f:
                inode = os.fstat(f.fileno()).st_ino
                f.seek(max(self.offset - len(self.last), 0))
                if inode != self.inode or f.read(len(self.last)) != self.last:   # replaced or cut back
                    self.rows, self.offset, self.last, self.inode = [], 0, b"", inode
                f.seek(self.offset)
                chunk = f.read()
        except OSError:
            return self.rows
        lines = chunk[:chunk.rfind(b"\n") + 1].splitlines(keepends=True)   # complete lines only
        for line in lines:
            self.rows.append(json.loads(line))
        if lines:
            self.offset += sum(map(len, lines))
            self.last = lines[-1]
        return self.rows


_tails: Dict[Path, Tail] = {}


def lines(path: Path, kind: str) -> List[Dict[str, Any]]:
    tail = _tails.setdefault(path, Tail(path))
    return [r for r in tail.read() if r.get("kind") == kind]


def accounting(run_dir: Path, result: Dict[str, Any], step_s: float) -> goodput.Goodput:
    """The chaos run's goodput and badput by cause, by the code every run's summary and `pretrain
    status` use, over the bench's own wall (from its launch of the job, which the run cannot see)."""
    records = [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines() if ln.strip()]
    train = {int(r["step"]): r for r in records if r["kind"] == "train"}
    return goodput.account(read_events(run_dir / "events.jsonl"), steps=result["steps"], step_s=step_s,
                           end_ts=result["started"] + result["wall_s"], first_step=train.get,
                           eval_s=goodput.eval_seconds(records), started_ts=result["started"])
