"""Where training metrics go: run_dir/metrics.jsonl (one JSON object per logged step, flushed at
once), TensorBoard event files under run_dir/tensorboard/, and a live progress bar on stdout.

A record is {"kind": "train" | "val", "step": global step, "phase": name, ...scalars, "ts": unix time it
was logged}; a val record also has "eval_s", the time since the step's train record (its evaluation).
The file is appended to, so a resumed run continues it; readers take the last record per (kind, step).
`ts` lets a reader that sees the run dir (pretrain status) place steps in time without the run.
"""

import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple, Union

# lazy imports (tensorboardX, tqdm): tensorboardX +~180 ms (numpy), tqdm +~50-120 ms; loaded when a run
# logs, not when status or a launch reads metrics

METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"


def host_memory_gb() -> float:
    """Resident set size of this process now (Linux /proc), else its peak (getrusage)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e9
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


_NOT_SCALARS = ("step", "ts")   # TensorBoard has its own step and wall time


class MetricsWriter:
    def __init__(self, run_dir: Union[str, os.PathLike], enabled: bool = True):
        self.enabled = enabled
        self.path = Path(run_dir) / METRICS_FILE
        self._file = None
        self._tb = None
        self._bar = None
        self._pending: Optional[Tuple[str, int, int, str]] = None   # the phase whose bar starts at its 1st step
        self._compiled = False   # has this process run a training step (so its graph is compiled)?
        self._train_logged: Optional[float] = None   # when the last train record was logged
        if enabled:
            # MindSpore's generated protobuf modules need the pure-Python protobuf backend, which it
            # selects through this variable when it is imported first; tensorboardX imported first
            # would load the C backend and make a later `import mindspore` fail.
            os.environ.setdefault("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")
            from tensorboardX import SummaryWriter

            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a", buffering=1, encoding="utf-8")
            self._tb = SummaryWriter(str(Path(run_dir) / TENSORBOARD_DIR), flush_secs=10)

    def log(self, record: Dict[str, Any]) -> None:
        if not self.enabled:
            return
        now = time.time()
        record = {**record, "ts": round(now, 3)}
        if record["kind"] == "train":
            self._train_logged = now
        elif record["kind"] == "val" and self._train_logged is not None:
            record["eval_s"] = round(now - self._train_logged, 4)
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        # One event holding the record's scalars, not one per scalar: MindSpore needs the pure-Python
        # protobuf, in which building and writing an event per scalar cost 2 ms of a 70 ms step here.
        from tensorboardX.proto.summary_pb2 import Summary

        kind = record["kind"]
        self._tb.file_writer.add_summary(Summary(value=[
            Summary.Value(tag=f"{kind}/{key}", simple_value=float(value)) for key, value in record.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool) and key not in _NOT_SCALARS]),
            int(record["step"]))

    def rewind(self, step: int) -> None:
        """Forget the records after `step`, which a resume or a loss-spike rollback runs again: the
        JSONL is cut in place (so it stays one record per step), and TensorBoard is told to purge
        its later points (a SessionLog START at step + 1, as SummaryWriter(purge_step=) does)."""
        if not self.enabled:
            return
        from tensorboardX.proto.event_pb2 import Event, SessionLog

        keep = 0
        with open(self.path, "rb") as fh:
            for line in fh:
                try:
                    if int(json.loads(line)["step"]) > step:
                        break
                except (ValueError, KeyError):  # a torn last line (killed mid-write)
                    break
                keep += len(line)
        os.truncate(self.path, keep)  # the file is open for append: the next record goes at `keep`
        self._tb.file_writer.add_event(Event(step=step + 1, session_log=SessionLog(status=SessionLog.START)))

    # ---- console (rank 0, stdout): a bar per phase, and one line per event worth a line
    def start_phase(self, name: str, steps: int, done: int = 0, overall: str = "") -> None:
        """The bar is made after the phase's first step: a first step that compiles the graph for a
        minute would make its rate (and the ETA) meaningless."""
        self._pending = (name, steps, done, overall)
        if self.enabled and not self._compiled:
            self.note(f"{overall}{name}: compiling the training graph (the first step takes a while) ...")

    def progress(self, record: Dict[str, Any]) -> None:
        if not self.enabled:
            return
        self._compiled = True
        if self._bar is None and self._pending is not None:
            from tqdm import tqdm

            name, steps, done, overall = self._pending
            self._bar = tqdm(total=steps, initial=done, desc=f"{overall}{name:>9}", unit="step",
                             file=sys.stdout, dynamic_ncols=True, mininterval=1.0)
        if self._bar is not None:
            self._bar.set_postfix_str(
                f"loss {record['loss']:.3f} lr {record['lr']:.2e} {record['tokens_per_s']:.0f} tok/s",
                refresh=False,
            )
            self._bar.update(1)

    def note(self, line: str) -> None:
        """One line on the console, above the bar if one is showing."""
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.write(line, file=sys.stdout)
        else:
            print(line, flush=True)

    def end_phase(self) -> None:
        self._pending = None
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def close(self) -> None:
        self.end_phase()
        if self._tb is not None:
            self._tb.close()
        if self._file is not None:
            self._file.close()


def read_metrics(path: Union[str, os.PathLike]) -> List[Dict[str, Any]]:
    """Records in step order, the last one winning per (kind, step); a torn last line is dropped."""
    latest: Dict[Tuple[str, int], Dict[str, Any]] = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            latest[(rec["kind"], int(rec["step"]))] = rec
    return sorted(latest.values(), key=lambda r: (int(r["step"]), r["kind"] != "train"))


def phase_boundaries(records: Iterable[Dict[str, Any]]) -> List[Tuple[str, int, int]]:
    """(phase, first step, last step) of the train records, in order."""
    spans: List[List[Any]] = []
    for rec in records:
        if rec["kind"] != "train":
            continue
        if spans and spans[-1][0] == rec["phase"]:
            spans[-1][2] = int(rec["step"])
        else:
            spans.append([rec["phase"], int(rec["step"]), int(rec["step"])])
    return [tuple(s) for s in spans]


WINDOW = 10    # most steps a phase's start/end loss is averaged over (TrainState keeps its first ones)


def window_of(steps: int) -> int:
    return max(1, min(WINDOW, steps // 5))


def mean_of(values: List[float], first: bool, window: Optional[int] = None) -> float:
    """Mean of the first (or last) `window` values: start/end loss of a phase, robust to one noisy step."""
    window = window or window_of(len(values))
    chunk = values[:window] if first else values[-window:]
    return sum(chunk) / len(chunk)
