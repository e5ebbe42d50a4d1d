"""What `pretrain status` knows about a run: gathered from the files the run writes (events.jsonl,
metrics.jsonl, checkpoints/, config.yaml, plan.json, summary.json, the run dir's lock), never
written to, safe while the run is live and from any host that sees the run dir.

metrics.jsonl is read at a few dozen offsets (status/jsonl.py), never line by line; events.jsonl
(saves, restarts, spikes: thousands of lines in a month) is read whole."""
import errno
import fcntl
import json
import os
import shutil
import statistics
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import yaml

from pretrain.config.errors import PretrainRunError
from pretrain.resilience import goodput as gp
from pretrain.resilience.checkpoint import MANIFEST, QUARANTINE, published, sizes_match, verify
from pretrain.resilience.events import read_events
from pretrain.rundir import LOCK_FILE
from pretrain.train.metrics import METRICS_FILE
from pretrain.status.jsonl import JsonlFile

HOUR = 3600.0
_ENDINGS = ("finish", "error", "hang", "signal", "requeue")   # what a generation's last event may say
TAIL = 400          # records read from the end: the recent step time, the last validation loss
SAMPLES = 240       # records sampled for a trend (each one seek and one line)
GOODPUT_WARN = 0.7  # resilience.goodput_warn's default, for a run dir frozen before the key existed
# Goodput is judged once the run has been up this long: before, its start-up and compile dominate.
GOODPUT_JUDGED_AFTER_S = 600.0


def gather(run_dir: Path, now: Optional[float] = None, full_verify: bool = False) -> Dict[str, Any]:
    run_dir = Path(run_dir)
    if not any((run_dir / name).exists() for name in ("config.yaml", "events.jsonl", ".pretrain-run")):
        raise PretrainRunError(f"{run_dir} is not a pretrain run dir (no config.yaml, events.jsonl or "
                               f".pretrain-run): give the run dir, e.g. runs/tiny-single-cpu")
    now = time.time() if now is None else now
    cfg = _yaml(run_dir / "config.yaml")
    plan = _json(run_dir / "plan.json")
    events = read_events(run_dir / "events.jsonl") if (run_dir / "events.jsonl").is_file() else []
    out: Dict[str, Any] = {"run_dir": str(run_dir), "now": now, "running": lock_held(run_dir)}
    metrics = run_dir / METRICS_FILE
    with (JsonlFile(metrics) if metrics.is_file() else _Empty()) as mf:
        recent = mf.tail(TAIL)
        train = [r for r in recent if r.get("kind") == "train"]
        last = train[-1] if train else None
        step_s = statistics.median([float(r["step_time_s"]) for r in train[1:]]) if len(train) > 1 else (
            float(last["step_time_s"]) if last else None)
        summary = _json(run_dir / "summary.json")
        accounted = (summary.get("measured") or {}).get("step_s")
        if last and summary.get("global_step") == last["step"] and accounted:
            step_s = accounted   # an ended run: the step time its summary accounted with
        out["progress"] = _progress(events, last, step_s, plan, cfg)
        out["loss"] = _loss(mf, recent, events)
        ended = last and summary.get("global_step") == last["step"] and summary.get("goodput")
        if ended and not out["running"]:
            out["goodput"] = summary["goodput"]   # the run's own accounting, exact (every val record read)
        else:
            eval_s = _eval_estimate(mf, recent, last, cfg)
            end = _end_ts(events, last, now, out["running"])
            out["goodput"] = gp.account(events, steps=int(last["step"]) if last else 0, step_s=step_s,
                                        end_ts=end, first_step=mf.record_at, eval_s=eval_s).as_dict()
        out["restarts"] = _restarts(events, mf)
    out["checkpoint"] = _checkpoint(run_dir, cfg, now, full_verify)
    # the run's last sign of life: an event, or a step (the file's mtime for records without a ts)
    seen = [e["ts"] for e in events] + ([metrics.stat().st_mtime] if metrics.is_file() else [])
    out["last_activity_ts"] = max(seen) if seen else None
    out["verdict"], out["exit"] = _verdict(out, events, last, cfg, now)
    return out


# ------------------------------------------------------------------ the run's lock
def lock_held(run_dir: Path) -> bool:
    """Does a run hold RUN_DIR/.lock? Probed with a shared flock taken and dropped at once (the run
    holds it exclusively: the probe fails while it lives). A launch that tries to take the lock in
    those microseconds is refused as busy once; that is the price of asking the kernel rather than
    trusting a pid file that a kill -9 leaves behind."""
    try:
        fd = os.open(run_dir / LOCK_FILE, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except OSError as e:
        return e.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
    finally:
        os.close(fd)


# ------------------------------------------------------------------ progress
def _progress(events: List[Dict[str, Any]], last: Optional[Dict[str, Any]], step_s: Optional[float],
              plan: Dict[str, Any], cfg: Dict[str, Any]) -> Dict[str, Any]:
    start = next((e for e in reversed(events) if e.get("kind") == "start"), None)
    names = list(start["phases"]) if start else [p["name"] for p in plan.get("phases", [])]
    counts = ([int(n) for n in start["steps"]] if start
              else [round(p["steps"]) for p in plan.get("phases", [])])
    step = int(last["step"]) if last else 0
    per_step = float(plan.get("tokens_per_step") or 0) or None
    planned_days = {p["name"]: p.get("days") for p in plan.get("phases", [])}
    phases, begin = [], 0
    for name, count in zip(names, counts):
        done = max(0, min(step - begin, count))
        mix = ((cfg.get("phase") or {}).get(name) or {}).get("mix") or {}
        tokens = done * per_step if per_step else None
        weights = sum(float(w) for w in mix.values()) or 1.0
        phases.append({"phase": name, "steps": count, "done": done, "tokens": tokens,
                       "by_source": ({s: tokens * float(w) / weights for s, w in mix.items()}
                                     if tokens else {}),
                       "planned_days": planned_days.get(name)})
        begin += count
    total = sum(counts)
    left = max(0, total - step)
    return {"step": step, "total_steps": total, "phase": last.get("phase") if last else None,
            "phases": phases, "step_s": step_s, "tokens_per_step": per_step,
            "days_left": left * step_s / 86400 if step_s else None,
            "planned_step_s": plan.get("step_s"),
            "planned_days_left": left * plan["step_s"] / 86400 if plan.get("step_s") else None,
            "planned_total_days": plan.get("total_days")}


# ------------------------------------------------------------------ loss
def _loss(mf: Any, recent: List[Dict[str, Any]], events: List[Dict[str, Any]]) -> Dict[str, Any]:
    train = [r for r in recent if r.get("kind") == "train"]
    vals = [r for r in recent if r.get("kind") == "val"]
    out: Dict[str, Any] = {"last": train[-1]["loss"] if train else None,
                           "val_last": vals[-1]["val_loss"] if vals else None,
                           "val_step": vals[-1]["step"] if vals else None}
    if train and "ts" in train[-1]:   # the last hour, by the records' own clock
        since = float(train[-1]["ts"]) - HOUR
        hour = mf.sample(mf.bisect(lambda r: float(r.get("ts", 0.0)), since), SAMPLES)
    else:                             # a run from before records had a ts: its last TAIL steps
        hour = train
    out["hour"] = _trend(hour)
    out["run"] = _trend(mf.sample(0, SAMPLES))
    out["spikes"] = sum(1 for e in events if e.get("kind") == "spike")
    out["rollbacks"] = [{"step": e["step"], "to_step": e.get("to_step"), "ts": e["ts"]}
                        for e in events if e.get("kind") == "rollback"]
    out["nonfinite_skipped"] = sum(1 for e in events if e.get("kind") == "skip" and e.get("what") == "update")
    return out


def _trend(records: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The mean loss of the first and last tenth of `records` (at least 3 each): smoothed ends."""
    losses = [float(r["loss"]) for r in records if r.get("loss") is not None]
    if len(losses) < 2:
        return None
    k = max(1, min(len(losses) // 2, max(3, len(losses) // 10)))
    return {"from": statistics.fmean(losses[:k]), "to": statistics.fmean(losses[-k:]),
            "from_step": records[0]["step"], "to_step": records[-1]["step"], "samples": len(losses)}


def _eval_estimate(mf: Any, recent: List[Dict[str, Any]], last: Optional[Dict[str, Any]],
                   cfg: Dict[str, Any]) -> float:
    """Evaluation time so far (one pass each eval_every steps; adding them up exactly would read every
    line): the first pass as it took (it compiles the eval graph: 15 s of the default job's 50) and the
    recent passes' median for each of the others."""
    spent = [float(r["eval_s"]) for r in recent if r.get("kind") == "val" and "eval_s" in r]
    every = int(((cfg.get("train") or {}).get("eval_every")) or 0)
    if not spent or not last or every <= 0:
        return 0.0
    passes = int(last["step"]) // every
    first = mf.record_at(every, "val") or {}
    if passes < 1 or "eval_s" not in first:
        return statistics.median(spent) * passes
    return float(first["eval_s"]) + statistics.median(spent) * (passes - 1)


def _end_ts(events: List[Dict[str, Any]], last: Optional[Dict[str, Any]], now: float, running: bool) -> float:
    """The wall's end: now while the run lives, else its last sign of life."""
    if running:
        return now
    seen = [e["ts"] for e in events] + ([float(last["ts"])] if last and "ts" in last else [])
    return max(seen) if seen else now


# ------------------------------------------------------------------ restarts
def _restarts(events: List[Dict[str, Any]], mf: Any) -> List[Dict[str, Any]]:
    out = []
    for k, e in enumerate(events):
        if e.get("kind") not in ("restart", "shrink"):
            continue
        since = float(e.get("failed_at") or e["ts"])
        start = next((s for s in events[k + 1:] if s.get("kind") == "start"), None)
        first = mf.record_at(int(start.get("step") or 0) + 1) if start else None
        back = float(first["ts"]) if first and "ts" in first and float(first["ts"]) >= since else None
        out.append({"kind": e["kind"], "ts": e["ts"], "cause": str(e.get("cause", "?")).split("; ")[0],
                    "node": e.get("node"), "rank": e.get("rank"), "steps_lost": e.get("steps_lost"),
                    "resume_step": e.get("resume_step"),
                    "down_s": back - since if back is not None else None,
                    "dp": [e.get("dp_from"), e.get("dp_to")] if e["kind"] == "shrink" else None})
    return out


# ------------------------------------------------------------------ checkpoints
def _checkpoint(run_dir: Path, cfg: Dict[str, Any], now: float, full_verify: bool) -> Dict[str, Any]:
    directory = run_dir / "checkpoints"
    found = published(directory)
    out: Dict[str, Any] = {"count": len(found), "dir": str(directory),
                           "quarantined": len(list((directory / QUARANTINE).glob("step_*")))
                           if (directory / QUARANTINE).is_dir() else 0}
    if not found:
        return out
    newest = found[0]
    problem = verify(newest.path) if full_verify else sizes_match(newest.path)
    size = _checkpoint_bytes(newest.path)
    free = shutil.disk_usage(directory).free
    out.update({"newest": newest.path.name, "step": newest.step, "age_s": now - newest.created,
                "verified": problem is None, "check": "sha256" if full_verify else "sizes",
                "problem": problem, "bytes": size, "free_bytes": free,
                "free_checkpoints": free // size if size else None})
    return out


def _checkpoint_bytes(path: Path) -> Optional[int]:
    try:
        files = json.loads((path / MANIFEST).read_text(encoding="utf-8"))["files"]
        return sum(int(f["size"]) for f in files.values())
    except (OSError, ValueError, KeyError, TypeError):
        return None


# ------------------------------------------------------------------ verdict
def _verdict(out: Dict[str, Any], events: List[Dict[str, Any]], last: Optional[Dict[str, Any]],
             cfg: Dict[str, Any], now: float) -> tuple:
    """(line, exit status): 0 healthy, 1 degraded, 2 stalled or failed."""
    res = cfg.get("resilience") or {}
    step = out["progress"]["step"]
    starts = [e for e in events if e.get("kind") == "start"]
    after = [e for e in events if not starts or e["ts"] >= starts[-1]["ts"]]
    ending = next((e for e in reversed(after) if e.get("kind") in _ENDINGS), None)
    if not out["running"]:
        if ending is None and not events:
            return "not started: no events yet and no run holds the run dir", 2
        kind = ending.get("kind") if ending else None
        if kind == "finish":
            return f"finished at step {ending.get('step', step)}", 0
        if kind in ("signal", "requeue"):
            how = ending.get("signal", "a requeue") if kind == "signal" else "Slurm's requeue"
            return (f"stopped by {how} at step {ending.get('step', step)}, checkpointed: the same command "
                    f"resumes it"), 1
        if kind in ("error", "hang"):
            reason = ending.get("reason") or ending.get("message") or kind
            return f"failed at step {ending.get('step', step)}: {str(reason).splitlines()[0][:160]}", 2
        return (f"failed: no run holds the run dir and it ended at step {step} without a finish, error or "
                f"signal event (killed -9, or its host lost)"), 2
    # running: stalled when no step came within the watchdog's timeout
    first_of_gen = not last or not starts or float(last.get("ts", 0.0)) < starts[-1]["ts"]
    limit = float(res.get("first_step_timeout_s" if first_of_gen else "watchdog_timeout_s") or 900.0)
    quiet = now - (out["last_activity_ts"] or now)
    if quiet > limit:
        return (f"stalled: no step for {gp.duration(quiet)} (limit {limit:g} s, "
                f"resilience.{'first_step_timeout_s' if first_of_gen else 'watchdog_timeout_s'}) "
                f"while the run holds its lock"), 2
    warn = float(res.get("goodput_warn", GOODPUT_WARN))
    recent = [r for r in out["restarts"] if now - r["ts"] < HOUR]
    good = out["goodput"]
    problems = []
    if recent:
        problems.append(f"{len(recent)} restart(s) in the last hour ({recent[-1]['cause']})")
    if good["goodput"] is not None and good["wall_s"] >= GOODPUT_JUDGED_AFTER_S and good["goodput"] < warn:
        problems.append(f"goodput {good['goodput']:.1%} < resilience.goodput_warn {warn:g}")
    ckpt = out["checkpoint"]
    if ckpt.get("newest") and not ckpt.get("verified"):
        problems.append(f"newest checkpoint {ckpt['newest']} does not verify ({ckpt['problem']})")
    if problems:
        return "degraded: " + "; ".join(problems), 1
    return f"healthy: training, step {step} of {out['progress']['total_steps']}", 0


# ------------------------------------------------------------------ files
def _yaml(path: Path) -> Dict[str, Any]:

    try:
        return yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return {}


def _json(path: Path) -> Dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


class _Empty:
    """A metrics file that does not exist yet (the run is preparing data or compiling)."""
    size = 0

    def __enter__(self) -> "_Empty":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def tail(self, n: int) -> List[Dict[str, Any]]:
        return []

    def sample(self, start: int, count: int, kind: str = "train") -> List[Dict[str, Any]]:
        return []

    def bisect(self, key: Any, value: float) -> int:
        return 0

    def train_at(self, step: int) -> None:
        return None
