"""`pretrain status` on synthetic run dirs written by the run's own writers (EventLog, MetricsWriter,
the run-dir lock), and the goodput accounting it shares with the summary and the chaos benchmark."""
import json
import subprocess
import sys
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


def _record(step, phase="general", loss=None, step_s=0.1):
    return {"kind": "train", "step": step, "phase": phase,
            "loss": 8.0 - step * 0.01 if loss is None else loss,
            "lr": 1e-3, "grad_norm": 1.0, "loss_scale": 1.0, "finite": True, "tokens_per_s": 1.0,
            "step_time_s": step_s}


def _run_dir(tmp_path: Path, steps: int = 30, eval_s=None) -> Path:
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
        writer.log(_record(k))
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


def test_the_command_line(tmp_path):
    run = _run_dir(tmp_path)
    with EventLog(run / "events.jsonl") as ev:
        ev.log("finish", step=30)
    out = subprocess.run([sys.executable, "-m", "pretrain.status", str(run), "--json",
                          "--plot", str(tmp_path / "s.png")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["verdict"] == "finished at step 30"
    assert (tmp_path / "s.png").stat().st_size > 1000
    text = subprocess.run([sys.executable, "-m", "pretrain", "status", str(run)],
                          capture_output=True, text=True)
    assert text.returncode == 0 and text.stdout.strip().endswith("finished at step 30"), text.stderr
    bad = subprocess.run([sys.executable, "-m", "pretrain.status", str(tmp_path)],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "not a pretrain run dir" in bad.stderr
