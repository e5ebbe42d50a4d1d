"""A run directory as `pretrain status` reads it, written without training: config, plan, events and
metrics of a two-phase run (the fast status tests and the CLI's)."""
import json
from pathlib import Path

from pretrain.resilience.events import EventLog
from pretrain.rundir import RunDirLock
from pretrain.train.metrics import MetricsWriter

CONFIG = """\
train: {eval_every: 5}
resilience: {watchdog_timeout_s: 60, first_step_timeout_s: 300, goodput_warn: 0.7}
phase:
  general: {mix: {general: 1.0}}
  anneal: {mix: {anneal: 0.6, general: 0.4}}
"""


def train_record(step, phase="general", loss=None, step_s=0.1):
    return {"kind": "train", "step": step, "phase": phase,
            "loss": 8.0 - step * 0.01 if loss is None else loss,
            "lr": 1e-3, "grad_norm": 1.0, "loss_scale": 1.0, "finite": True, "tokens_per_s": 1.0,
            "step_time_s": step_s}


def status_run_dir(tmp_path: Path, steps: int = 30, eval_s=None) -> Path:
    """tmp_path/run as a run of `steps` of 40 general + 10 anneal steps leaves it: config, plan, start
    event and metrics (a val pass every 5 steps, eval_s(step) seconds each where given)."""
    run = tmp_path / "run"
    RunDirLock(run).acquire().release()   # claimed as a run dir, as the app does first
    (run / "config.yaml").write_text(CONFIG)
    (run / "plan.json").write_text(json.dumps({"tokens_per_step": 100, "step_s": 0.1, "total_days": 0.001,
                                               "phases": [{"name": "general", "steps": 40, "days": 0.0005},
                                                          {"name": "anneal", "steps": 10, "days": 0.0001}]}))
    with EventLog(run / "events.jsonl") as ev:
        ev.log("start", step=0, phases=["general", "anneal"], steps=[40, 10])
    writer = MetricsWriter(run)
    for k in range(1, steps + 1):
        writer.log(train_record(k))
        if k % 5 == 0:
            writer.log({"kind": "val", "step": k, "phase": "general", "val_loss": 7.5})
    writer.close()
    if eval_s is not None:   # the writer times each pass itself (since its train record): set them
        metrics = run / "metrics.jsonl"
        records = [json.loads(line) for line in metrics.read_text().splitlines()]
        for r in records:
            if r["kind"] == "val":
                r["eval_s"] = eval_s(r["step"])
        metrics.write_text("".join(json.dumps(r) + "\n" for r in records))
    return run
