"""Goodput and badput of a run, from its own records: one computation for `pretrain status`, every
run's summary and the chaos benchmark, so no two of them can disagree.

goodput = productive step time / wall time since the first start, where productive step time is the
steps the run kept (its global step) x the median step time after compile (the effective-training-time
ratio Llama 3 and ByteRobust report; the chaos benchmark's formula). What the wall spent otherwise is
badput, by cause, each from a record the run writes:

    startup_compile   the first generation: its `start` event to the end of its first step, less one
                      median step (the loader's start and the graph compile)
    restarts          each `restart` / `shrink`: from the failure's detection (`failed_at`) to the end
                      of the relaunched generation's first step, less one median step (relaunch, model
                      build, checkpoint load, recompile)
    redone            steps trained twice: those a restart lost (`steps_lost`) and those a rollback
                      went back over, x the median step
    checkpoints       how long each save held the loop (`save` events' stall_s)
    evaluation        validation passes (the `eval_s` of val records)
    idle              between generations without a restart event (stopped, then started by hand)
    other             the rest: step jitter, the warm-up steps after compile, loop work, the time a
                      fault took to be detected

Pure Python over plain dicts (events as read_events returns them; metrics records as the writer
writes them), so every layer above may call it.
"""
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional

CAUSES = ("startup_compile", "restarts", "redone", "checkpoints", "evaluation", "idle", "other")
_RESTARTS = ("restart", "shrink")


@dataclass
class Goodput:
    wall_s: float
    productive_s: float
    badput_s: Dict[str, float] = field(default_factory=dict)

    @property
    def goodput(self) -> Optional[float]:
        return self.productive_s / self.wall_s if self.wall_s > 0 else None

    @classmethod
    def of(cls, d: Dict[str, Any]) -> "Goodput":
        """Back from as_dict() (summary.json's "goodput")."""
        return cls(d["wall_s"], d["productive_s"], dict(d["badput_s"]))

    def as_dict(self) -> Dict[str, Any]:
        return {"goodput": self.goodput, "wall_s": self.wall_s, "productive_s": self.productive_s,
                "badput_s": dict(self.badput_s),
                "badput": {k: (v / self.wall_s if self.wall_s > 0 else None)
                           for k, v in self.badput_s.items()}}


def goodput_of(steps: int, step_s: float, wall_s: float) -> Optional[float]:
    """The formula itself: steps kept x median step / wall."""
    return steps * step_s / wall_s if wall_s > 0 else None


def account(events: List[Dict[str, Any]], *, steps: int, step_s: Optional[float], end_ts: float,
            first_step: Callable[[int], Optional[Dict[str, Any]]] = lambda step: None,
            eval_s: float = 0.0, started_ts: Optional[float] = None) -> Goodput:
    """The run's accounting up to `end_ts`.

    `steps`: steps kept (the global step); `step_s`: the median step after compile; `first_step(k)`:
    the train record of global step k (with its `ts` and `step_time_s`) or None where it is not known;
    `eval_s`: the evaluation time; `started_ts`: the wall's start when the caller timed it itself
    (the chaos benchmark, from its process launch), else the first `start` event."""
    step_s = step_s or 0.0
    starts = [e for e in events if e.get("kind") == "start"]
    t0 = started_ts if started_ts is not None else (starts[0]["ts"] if starts else end_ts)
    wall = max(0.0, end_ts - t0)
    bad = {cause: 0.0 for cause in CAUSES}
    bad["checkpoints"] = sum(float(e.get("stall_s") or 0.0) for e in events if e.get("kind") == "save")
    bad["evaluation"] = float(eval_s)
    lost = sum(int(e.get("steps_lost") or 0) for e in events if e.get("kind") in _RESTARTS)
    lost += sum(max(0, int(e["step"]) - int(e["to_step"])) for e in events
                if e.get("kind") == "rollback" and "to_step" in e)
    bad["redone"] = lost * step_s

    # each generation: a `start` event; what came before it is a restart, or idle time
    for k, start in enumerate(starts):
        done = _first_step_done(start, first_step)
        if k == 0:
            begin = start["ts"] if started_ts is None else started_ts
            bad["startup_compile"] += max(0.0, (done if done is not None else start["ts"]) - begin - step_s)
            continue
        before = [e for e in events if starts[k - 1]["ts"] < e["ts"] < start["ts"]]
        fault = next((e for e in reversed(before) if e.get("kind") in _RESTARTS), None)
        if fault is not None:
            since = float(fault.get("failed_at") or fault["ts"])
            bad["restarts"] += max(0.0, (done if done is not None else start["ts"]) - since - step_s)
        else:
            last = max(e["ts"] for e in before) if before else starts[k - 1]["ts"]
            bad["idle"] += max(0.0, start["ts"] - last)
            bad["startup_compile"] += max(0.0, (done - start["ts"] - step_s) if done is not None else 0.0)
    productive = steps * step_s
    bad["other"] = max(0.0, wall - productive - sum(bad.values()))
    return Goodput(wall_s=wall, productive_s=productive, badput_s=bad)


def _first_step_done(start: Dict[str, Any], first_step: Callable[[int], Optional[Dict[str, Any]]]
                     ) -> Optional[float]:
    """When the generation begun by `start` finished its first step (the record's ts; without one, a run
    from before records had it, the start plus the step's own time), or None when its record is gone
    (a later rewind)."""
    record = first_step(int(start.get("step") or 0) + 1)
    if record and record.get("ts") is not None and float(record["ts"]) >= float(start["ts"]):
        return float(record["ts"])
    if record and record.get("ts") is None and record.get("step_time_s") is not None:
        return float(start["ts"]) + float(record["step_time_s"])   # its compile, not the loader's start
    return None


def eval_seconds(records: Iterable[Dict[str, Any]]) -> float:
    return sum(float(r.get("eval_s") or 0.0) for r in records if r.get("kind") == "val")


def format_line(g: Goodput) -> str:
    """One line: goodput and the badput causes that took any time, largest first."""
    if g.goodput is None:
        return "goodput: - (no wall time yet)"
    parts = sorted(((v, k) for k, v in g.badput_s.items() if v >= 0.5), reverse=True)   # < 0.5 s: noise
    lost = ", ".join(f"{k.replace('_', '+')} {v / g.wall_s:.1%} ({duration(v)})" for v, k in parts)
    return f"goodput {g.goodput:.1%} of {duration(g.wall_s)} wall; badput: {lost or 'none'}"


def duration(seconds: float) -> str:
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.1f} d"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.1f} s"
