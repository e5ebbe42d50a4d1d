"""What the loop prints and writes about a phase and a run: each phase's result record, the line at
a phase boundary, the run's summary (summary.json, loss curve, table), and the hint a stopped run
ends with."""
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from pretrain.io import write_atomic
from pretrain.resilience import goodput
from pretrain.resilience.events import read_events
from pretrain.train import measure
from pretrain.train.metrics import METRICS_FILE, TENSORBOARD_DIR, mean_of, read_metrics, window_of
from pretrain.train.plot import plot_curves

# lazy imports (tensorboardX): +~180 ms (numpy); loaded when a run writes its summary


def finish(run_dir: Path, trainer: Any, results: List[Dict[str, Any]], wall_s: float, checkpoints: Path,
           events: Optional[Any]) -> Dict[str, Any]:
    """The run's summary; on the logging rank (`events` set) also its `finish` event, summary.json,
    loss curve and table, or the line that says there was nothing left to train."""
    summary = {
        "run_dir": str(run_dir),
        "phases": results,
        "global_step": trainer.state.global_step,
        "params": sum(int(p.size) for p in trainer.step.net.trainable_params()),
        "wall_s": wall_s,
        "measured": measure.of_run(results),
    }
    if trainer.keeper.stopped:
        summary["stopped"] = trainer.keeper.stopped
    if events is None:
        return summary
    if not trainer.keeper.stopped:
        events.log("finish", step=trainer.state.global_step, wall_s=round(summary["wall_s"], 2))
    events.close()
    if not results and not trainer.keeper.stopped:   # the finished run's summary.json stays as it was
        print(f"nothing to train: every phase of this run is already done ({checkpoints}); "
              f"use another run_dir to train again", flush=True)
    else:
        plot_curves(run_dir / METRICS_FILE, run_dir / "loss_curve.png")
        summary["goodput"] = run_goodput(run_dir, summary["measured"]["step_s"], trainer.state.global_step)
        write_atomic(run_dir / "summary.json", json.dumps(summary, indent=2))
        note_measured(run_dir / "plan.json", results)
        print(format_summary(summary), flush=True)
    if trainer.keeper.stopped:
        print(resume_hint(trainer.keeper.stopped, trainer.state.global_step, checkpoints), flush=True)
    return summary


def run_goodput(run_dir: Path, step_s: Optional[float], steps: int) -> Dict[str, Any]:
    """The run's goodput and badput by cause since its first start (pretrain/resilience/goodput.py,
    the accounting `pretrain status` and the chaos benchmark use), also as TensorBoard scalars."""
    events = read_events(run_dir / "events.jsonl")
    records = read_metrics(run_dir / METRICS_FILE)
    train = {int(r["step"]): r for r in records if r["kind"] == "train"}
    end = max(e["ts"] for e in events) if events else time.time()   # the finish (or stop) event
    acct = goodput.account(events, steps=steps, step_s=step_s, end_ts=end, first_step=train.get,
                           eval_s=goodput.eval_seconds(records))
    from tensorboardX import SummaryWriter   # after metrics.py set the protobuf backend MindSpore needs

    with SummaryWriter(str(run_dir / TENSORBOARD_DIR)) as tb:
        if acct.goodput is not None:
            tb.add_scalar("run/goodput", acct.goodput, steps)
        for cause, seconds in acct.badput_s.items():
            tb.add_scalar(f"run/badput_s/{cause}", seconds, steps)
    return acct.as_dict()


def phase_result(phase: Any, first_step: int, last_step: int, stopped: bool, wall: float,
                 losses: Dict[int, float], val: Dict[int, float], tokens_per_step: int,
                 head: Optional[List[float]] = None) -> Dict[str, Any]:
    """One phase's record in summary.json: losses and val losses keyed by global step. Like `steps`
    (the phase's), the start losses are the phase's own, from `head` (its first losses, which the
    checkpoint carries) when the phase was resumed; first_step and the rate are this process's."""
    steps = [losses[k] for k in sorted(losses)]
    vals = [val[k] for k in sorted(val)]
    start = list(head or []) or steps     # a checkpoint from before TrainState.phase_losses: this run's
    window = window_of(phase.steps) if head else None
    return {
        "phase": phase.name,
        "steps": phase.steps,
        "first_step": first_step,
        "last_step": last_step,
        "stopped": stopped,
        "resumed": head is not None,
        "tokens": phase.steps * tokens_per_step,
        "wall_s": wall,
        "loss_first": start[0] if start else None,
        "loss_last": steps[-1] if steps else None,
        "loss_start_mean": mean_of(start, first=True, window=window) if start else None,
        "loss_end_mean": mean_of(steps, first=False) if steps else None,
        "val_loss_first": vals[0] if vals else None,
        "val_loss_last": vals[-1] if vals else None,
        "lr_first": phase.lr.at(0),
        "lr_last": phase.lr.final,
        "tokens_per_s": len(steps) * tokens_per_step / wall if steps else None,
    }


def boundary_line(done: Dict[str, Any], rest: List[Any], total: int, tokens_per_step: int) -> str:
    """One line at the end of a phase: how it went, where the whole run stands, what is next."""
    val = f", val {done['val_loss_last']:.3f}" if done["val_loss_last"] is not None else ""
    steps = f"{done['first_step']}-{done['last_step']}"
    if done.get("resumed"):   # the losses are the phase's, from its first step; this process ran the rest
        start = done["last_step"] - done["steps"] + 1
        steps = f"{start}-{done['last_step']} (resumed at {done['first_step']})"
    line = (f"phase {done['phase']} done: steps {steps}, loss "
            f"{done['loss_first']:.3f} -> {done['loss_last']:.3f}{val}, {done['wall_s']:.0f} s")
    left = sum(p.steps for p in rest)
    line += f"; run: {total - left} of {total} steps, {(total - left) * tokens_per_step:,} tokens"
    ran = done["last_step"] - done["first_step"] + 1
    if rest and ran > 0:
        eta = left * done["wall_s"] / ran
        line += (f"; next {rest[0].name} ({rest[0].steps} steps), about "
                 + (f"{eta / 60:.0f} min" if eta >= 90 else f"{eta:.0f} s") + " left")
    return line


def format_summary(summary: Dict[str, Any]) -> str:
    lines = [
        f"trained {summary['params']:,} parameters for {summary['global_step']} steps in "
        f"{summary['wall_s']:.0f} s -> {summary['run_dir']}",
        f"{'phase':<10}{'steps':>6}{'loss first':>12}{'loss last':>11}{'(mean first/last)':>20}"
        f"{'val last':>10}{'lr first':>11}{'lr last':>10}{'tok/s':>8}{'wall s':>8}",
    ]
    for r in summary["phases"]:
        val = f"{r['val_loss_last']:.3f}" if r["val_loss_last"] is not None else "-"
        lines.append(
            f"{r['phase']:<10}{r['steps']:>6}{r['loss_first']:>12.3f}{r['loss_last']:>11.3f}"
            f"{r['loss_start_mean']:>10.3f}/{r['loss_end_mean']:<9.3f}{val:>10}{r['lr_first']:>11.2e}"
            f"{r['lr_last']:>10.2e}{r['tokens_per_s']:>8.0f}{r['wall_s']:>8.0f}"
        )
    if summary.get("goodput"):
        lines.append(goodput.format_line(goodput.Goodput.of(summary["goodput"])))
    return "\n".join(lines + format_versus(summary["phases"]))


def note_measured(plan_json: Path, results: List[Dict[str, Any]]) -> None:
    """plan.json (the launch's plan) gains, per phase, what the run measured beside it."""
    try:
        plan = json.loads(plan_json.read_text())
    except (OSError, ValueError):   # a run started without the app (tests, pretrain.worker alone)
        return
    measured = {**plan.get("measured", {}), **{r["phase"]: r["measured"] for r in results if "measured" in r}}
    write_atomic(plan_json, json.dumps({**plan, "measured": measured}, indent=2, default=str))


_VERSUS = (("step_s", "step s", "{:.3f}"), ("tokens_per_s", "tokens/s", "{:,.0f}"),
           ("memory_gb", "memory GB", "{:.2f}"), ("save_s", "save s", "{:.2f}"),
           ("comm_s", "all-reduce s", "{:.3f}"))


def _versus(planned: Dict[str, Any], measured: Dict[str, Any], key: str, fmt: str) -> str:
    p, m = planned.get(key), measured.get(key)
    if p is None or m is None:
        return "-"
    ratio = f" ({m / p - 1:+.0%})" if p else ""
    return f"{fmt.format(p)} / {fmt.format(m)}{ratio}"


def format_versus(results: List[Dict[str, Any]]) -> List[str]:
    """Per phase, planned / measured (and how far off) for what the plan promised."""
    rows = [r for r in results if "planned" in r and "measured" in r]
    if not rows:
        return []
    lines = [f"planned / measured ({rows[0]['planned']['source']}):",
             f"{'phase':<10}" + "".join(f"{title:>26}" for _, title, _ in _VERSUS)]
    for r in rows:
        lines.append(f"{r['phase']:<10}" + "".join(f"{_versus(r['planned'], r['measured'], key, fmt):>26}"
                                                  for key, _, fmt in _VERSUS) + _busy(r["planned"], r["measured"]))
    return lines


OFF = 0.30   # a planned time this far from the measured one says why on its line


def _busy(planned: Dict[str, Any], measured: Dict[str, Any]) -> str:
    """Why the times are off, when the host was busy: other work shared the cores the step was timed on."""
    host = measured.get("host_load") or {}
    times = [(planned.get(k), measured.get(k)) for k in ("step_s", "save_s")]
    off = any(p and m and abs(m / p - 1) > OFF for p, m in times)
    if not off or host.get("load", 0.0) <= host.get("cores", 1):
        return ""
    return f"  (host busy: load {host['load']:g} on {host['cores']} cores)"


def resume_hint(stopped: str, step: int, directory: Path) -> str:
    command = "the same command"
    if sys.argv and Path(sys.argv[0]).name == "__main__.py" and Path(sys.argv[0]).parent.name == "pretrain":
        command = shlex.join(["python", "-m", "pretrain", *sys.argv[1:]])
    return (f"stopped by {stopped} after step {step}; its checkpoint is in "
            f"{directory}. To resume, run {command} again (same run_dir): it continues "
            f"from step {step}")
