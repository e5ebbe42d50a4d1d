"""Sweep summary: every job of a multirun is one row, valid or not.

Each job writes <job dir>/row.json (pretrain.app); after the sweep, Hydra calls
SweepSummary.on_multirun_end, which writes summary.csv, summary.md and summary.png
(memory per device by part and estimated throughput per layout) into the sweep dir; a
sweep stopped by SIGINT / SIGTERM writes them for the jobs that finished
(pretrain.sweep.interrupt). A job that trained adds its final validation loss (`val_loss`: the
last phase's val_loss_last in the job's summary.json), so an LR sweep
(`-m phase=reasoning phase.lr.peak=1e-5,3e-5,1e-4`) compares branches by it, best first.
"""
import csv
import json
import signal
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from pretrain.io import write_atomic
from pretrain.sweep import interrupt

# lazy imports (matplotlib): by design; only the sweep's plot draws

COLUMNS = ["job", "label", "status", "engine", "peak_gb", "measured_gb", "capacity_gb", "weights_gb",
           "grads_gb", "optimizer_gb", "activations_gb", "bubble", "step_s", "measured_step_s", "tokens_per_s",
           "measured_tokens_per_s", "mfu", "total_days", "val_loss", "reason", "overrides"]
STATUS_ORDER = {"ok": 0, "plan only": 1, "does not fit": 2, "invalid": 3}
STATUS_COLORS = {"ok": "#55a868", "plan only": "#dd8452", "does not fit": "#c44e52", "invalid": "#999999"}


def plan_row(plan: Any) -> Dict[str, Any]:
    """The columns a sweep compares, from a planner Plan."""
    peak = plan.peak
    return {"peak_gb": peak.total_gb, "capacity_gb": plan.capacity_gb, "weights_gb": peak.weights_gb,
            "grads_gb": peak.grads_gb, "optimizer_gb": peak.optimizer_gb,
            "activations_gb": peak.activations_gb + peak.logits_gb, "bubble": plan.bubble,
            "step_s": plan.step_s, "tokens_per_s": plan.tokens_per_s, "mfu": plan.mfu,
            "total_days": plan.total_days, "engine": plan.engine}


def verdict_line(row: Dict[str, Any]) -> str:
    """One console line per sweep job: its verdict and the figures that decide between layouts."""
    status, reason = row["status"], (row.get("reason") or "").split("; ")[0]
    if status == "invalid":
        return f"invalid: {reason}"
    head = (f"does not fit by {row['peak_gb'] - row['capacity_gb']:.1f} GB" if status == "does not fit"
            else status)
    figures = (f"{row['peak_gb']:.1f} of {row['capacity_gb']:g} GB, {row['total_days']:.1f} days, "
               f"{row['tokens_per_s']:,.0f} tokens/s")
    stopped = f"; stopped by {row['stopped']} at a checkpoint" if row.get("stopped") else ""
    return f"{head}: {figures}" + (f"; {reason[:120]}" if status == "plan only" else "") + stopped


def write_row(job_dir: Path, row: Dict[str, Any]) -> None:
    job_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(job_dir / "row.json", json.dumps(row, default=str))


def final_val_loss(job_dir: Path) -> Optional[float]:
    """The validation loss the job's run ended with (None: it did not train, or had no validation)."""
    try:
        phases = json.loads((job_dir / "summary.json").read_text()).get("phases") or []
    except (OSError, ValueError):
        return None
    return phases[-1].get("val_loss_last") if phases else None


def read_rows(sweep_dir: Path) -> List[Dict[str, Any]]:
    """Rows by job number, each labelled by the overrides that vary across the sweep."""
    rows = []
    for path in sweep_dir.glob("*/row.json"):
        row = json.loads(path.read_text())
        row["val_loss"] = final_val_loss(path.parent)
        rows.append(row)
    rows.sort(key=lambda r: int(r["job"]))
    common = set.intersection(*(set(r["overrides"].split()) for r in rows)) if len(rows) > 1 else set()
    for r in rows:
        r["label"] = " ".join(o for o in r["overrides"].split() if o not in common) or str(r["job"])
    return rows


def _fmt(value: Any, column: str = "") -> str:
    if column == "val_loss" and isinstance(value, float):
        return f"{value:.4f}"  # branches of an LR sweep differ in the third decimal
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return "" if value is None else str(value)


def write_summary(sweep_dir: Path) -> List[Dict[str, Any]]:
    rows = read_rows(sweep_dir)
    with open(sweep_dir / "summary.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    # trained jobs by validation loss (an LR sweep), plans by estimated throughput (a layout sweep)
    ranked = sorted(rows, key=lambda r: (STATUS_ORDER.get(r["status"], 3), r["val_loss"] is None,
                                         r["val_loss"] or 0.0, -(r.get("tokens_per_s") or 0)))
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(_fmt(r.get(c), c).replace("|", "/") for c in COLUMNS) + " |" for r in ranked]
    (sweep_dir / "summary.md").write_text("\n".join(lines) + "\n")
    _chart(rows, sweep_dir / "summary.png")
    return rows


def _chart(rows: List[Dict[str, Any]], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [r["label"].replace("parallel.", "").replace("parallel=", "") for r in rows]
    fig, (mem, speed) = plt.subplots(2, 1, figsize=(max(8, 0.6 * len(rows) + 3), 8), sharex=True)
    bottom = [0.0] * len(rows)
    for part, color in [("weights_gb", "#4c72b0"), ("grads_gb", "#55a868"), ("optimizer_gb", "#c44e52"),
                        ("activations_gb", "#8172b2")]:
        values = [r.get(part) or 0.0 for r in rows]
        mem.bar(range(len(rows)), values, bottom=bottom, color=color, label=part.replace("_gb", ""))
        bottom = [b + v for b, v in zip(bottom, values)]
    capacity = next((r["capacity_gb"] for r in rows if r.get("capacity_gb")), None)
    if capacity:
        mem.axhline(capacity, color="black", linestyle="--", label=f"device memory {capacity:g} GB")
    for i, r in enumerate(rows):
        if r["status"] == "invalid":
            mem.text(i, 0, "invalid", rotation=90, ha="center", va="bottom", fontsize=8, color="gray")
    measured_gb = [(i, r["measured_gb"]) for i, r in enumerate(rows) if r.get("measured_gb")]
    if measured_gb:   # the process's peak host memory (on CPU: with the framework's own)
        mem.plot(*zip(*measured_gb), "k*", markersize=10, label="measured (process)")
    mem.set_ylabel("GB per device (peak stage)")
    mem.legend(fontsize=8, loc="upper right")
    for status, color in STATUS_COLORS.items():
        shown = [(i, r.get("tokens_per_s") or 0.0) for i, r in enumerate(rows) if r["status"] == status]
        if shown:
            speed.bar(*zip(*shown), color=color, label=status)
    measured = [(i, r["measured_tokens_per_s"]) for i, r in enumerate(rows) if r.get("measured_tokens_per_s")]
    if measured:
        speed.plot(*zip(*measured), "k*", markersize=10, label="measured")
    speed.legend(fontsize=8)
    speed.set_ylabel("estimated tokens/s (all devices)")
    speed.set_xticks(range(len(rows)), labels, rotation=60, ha="right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def counts(rows: List[Dict[str, Any]]) -> str:
    """How many rows have each status: `9 ok, 0 plan only, 9 does not fit, 21 invalid`."""
    return ", ".join(f"{sum(r['status'] == s for r in rows)} {s}" for s in STATUS_ORDER)


def after_interrupt(exc: interrupt.SweepInterrupted) -> int:
    """A sweep stopped by a signal: the summary of the jobs that finished, one line on stderr; the
    exit status (128 + signum)."""
    name = signal.Signals(exc.signum).name
    sweep = interrupt.current()
    if sweep is None:   # a job's stop outside a sweep: nothing to sum up
        print(f"interrupted ({name})", file=sys.stderr, flush=True)
        return 128 + exc.signum
    rows = write_summary(sweep.sweep_dir) if any(sweep.sweep_dir.glob("*/row.json")) else []
    of, left = ((f" of {sweep.planned}", f", {sweep.planned - len(rows)} left") if sweep.planned is not None
                else ("", ", the rest not run"))
    where = (f"; summary of the finished ones in {sweep.sweep_dir}/summary.md, .csv, .png ({counts(rows)})"
             if rows else "; no summary written")
    print(f"interrupted ({name}): sweep stopped, {len(rows)}{of} jobs finished{left}{where}",
          file=sys.stderr, flush=True)
    return 128 + exc.signum


class SweepSummary(Callback):
    """The summary when every job ran; an interrupted sweep's from pretrain.sweep.interrupt."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        interrupt.begin(config)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        rows = write_summary(sweep_dir)
        print(f"sweep: {len(rows)} jobs ({counts(rows)}); summary in {sweep_dir}/summary.md, .csv, .png")
        interrupt.end()   # after the summary: a signal while it is written ends as any interrupted sweep
