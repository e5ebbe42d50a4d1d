"""A sweep stopped by SIGINT / SIGTERM (issue 40): the jobs that finished are summarised (summary.csv,
.md, .png), one line says how many were left, and the exit status is 130 / 143. Before: an 84-line
KeyboardInterrupt traceback and no summary; SIGTERM ended it silently."""
import csv
import json
import signal
import subprocess
import time

import pytest

from tests.helpers import cli
from tests.helpers.models import SMALL_MODEL

JOBS = 20   # dry runs of the tiny model, ~1 s each: the signal comes long before the last


def sweep(tmp_path, *args, cache=None):
    return cli.start("-m", *args, "hydra.sweep.dir=sweep", cwd=tmp_path, cache=cache, stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, text=True)


def finished_rows(tmp_path):
    return sorted((tmp_path / "sweep").glob("*/row.json"))


@pytest.mark.slow   # two sweeps of real job processes, signalled: ~10 s each
@pytest.mark.parametrize("signals, code", [((signal.SIGINT, signal.SIGINT), 130), ((signal.SIGTERM,), 143)],
                         ids=["ctrl-c twice", "sigterm"])
def test_an_interrupted_sweep_summarises_the_jobs_that_finished_in_one_line(tmp_path, signals, code):
    proc = sweep(tmp_path, "dry_run=true", f"train.seed=range(1,{JOBS + 1})")
    for line in proc.stdout:
        if line.startswith("  #1 "):   # two jobs done, the third starting
            break
    for signum in signals:   # a second Ctrl-C while the summary is written changes nothing
        proc.send_signal(signum)
        time.sleep(0.2)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err[-3000:]
    rows = finished_rows(tmp_path)
    n = len(rows)
    assert 2 <= n < JOBS
    name = signal.Signals(signals[0]).name
    assert err.splitlines() == [
        f"interrupted ({name}): sweep stopped, {n} of {JOBS} jobs finished, {JOBS - n} left; summary of the "
        f"finished ones in sweep/summary.md, .csv, .png ({n} ok, 0 plan only, 0 does not fit, 0 invalid)"]
    summary = list(csv.DictReader((tmp_path / "sweep" / "summary.csv").read_text().splitlines()))
    assert [int(r["job"]) for r in summary] == list(range(n)) and all(r["status"] == "ok" for r in summary)
    assert (tmp_path / "sweep" / "summary.md").is_file() and (tmp_path / "sweep" / "summary.png").is_file()
    assert "sweep:" not in out   # the line of a sweep that ran every job is not claimed


@pytest.mark.slow   # a sweep of real job processes
def test_a_sweep_interrupted_before_any_job_finished_says_so(tmp_path):
    proc = sweep(tmp_path, "dry_run=true", f"train.seed=range(1,{JOBS + 1})")
    for line in proc.stdout:
        if "#0 :" in line:   # Hydra starts job 0: it has not finished
            break
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130
    assert err.splitlines() == [
        f"interrupted (SIGINT): sweep stopped, 0 of {JOBS} jobs finished, {JOBS} left; no summary written"]
    assert finished_rows(tmp_path) == [] and not (tmp_path / "sweep" / "summary.csv").exists()


@pytest.mark.slow
def test_a_job_whose_training_takes_the_signal_stops_at_its_checkpoint_and_the_sweep_after_it(
        tmp_path, data_cache):
    """An LR-style sweep of training jobs: Ctrl-C reaches the running job's loop, which finishes the
    step and checkpoints (it owns the signal then); the sweep then ends with that job's row instead
    of starting the next one."""
    proc = sweep(tmp_path, *SMALL_MODEL, "phase=general", "train.eval_every=0",
                 "train.total_tokens=400000", "train.seed=1,2", cache=data_cache)
    metrics = tmp_path / "sweep" / "0" / "metrics.jsonl"
    deadline = time.time() + 300
    while proc.poll() is None and time.time() < deadline:
        if metrics.is_file() and '"kind": "train"' in metrics.read_text():
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    job = tmp_path / "sweep" / "0"
    row = json.loads((job / "row.json").read_text())
    # the signal the loop saw: MindSpore's runtime turns a Ctrl-C during a graph into SIGTERM
    name = row["stopped"]
    assert name in ("SIGINT", "SIGTERM") and proc.returncode == 128 + signal.Signals[name], err[-3000:]
    assert err.splitlines() == [
        f"interrupted ({name}): sweep stopped, 1 of 2 jobs finished, 1 left; summary of the finished ones in "
        f"sweep/summary.md, .csv, .png (1 ok, 0 plan only, 0 does not fit, 0 invalid)"]
    assert "#0 ok:" in out and f"stopped by {name} at a checkpoint" in out
    events = [json.loads(line) for line in (job / "events.jsonl").read_text().splitlines()]
    (stop,) = [e for e in events if e["kind"] == "signal"]
    assert (job / "checkpoints" / f"step_{stop['step']:08d}").is_dir()
    assert not (tmp_path / "sweep" / "1").exists()   # the next job never started
