"""A phase LR from the CLI, end to end on CPU (the real, shrunken MindFormers model): after the
default job, `phase=reasoning phase.lr.peak=3e-5` trains reasoning as a branch, from the general
phase's final checkpoint of the base run, in its own run dir; the same command again resumes the
branch; and `-m phase=reasoning phase.lr.peak=1e-5,3e-5,1e-4` is an LR sweep whose summary has
one row per LR with its final validation loss. Fast checks of the same logic: test_phase_branch.py."""
import csv
import json
import math
from pathlib import Path

import pytest

from pretrain.train.metrics import read_metrics
from tests.helpers import cli
from tests.helpers.models import SMALL_MODEL

pytestmark = pytest.mark.slow

# 40 steps of 8 x 64 tokens (general 28, reasoning 8, anneal 4), as in test_resilience_e2e.py
ARGS = [
    *SMALL_MODEL,
    "train.total_tokens=20480",
    "train.eval_every=0",
]
BASE = Path("runs") / "tiny-single-cpu"
GENERAL_FINAL = "step_00000028-phase-general-final"


@pytest.fixture(scope="module")
def work(tmp_path_factory, data_cache):
    """A directory in which the default job (shrunken) has run once: the base run."""
    cwd = tmp_path_factory.mktemp("branch")

    def run(*args):
        return cli.run(*args, *ARGS, cwd=cwd, cache=data_cache, timeout=900, check=True)

    run()
    return cwd, run


def train_records(run_dir):
    return [r for r in read_metrics(run_dir / "metrics.jsonl") if r["kind"] == "train"]


def events(run_dir, kind):
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["kind"] == kind]


def listing(directory):
    return sorted((str(p.relative_to(directory)), p.stat().st_mtime_ns) for p in directory.rglob("*"))


def cosine(peak, end, i, n):
    return end + (peak - end) * 0.5 * (1 + math.cos(math.pi * (i + 1) / n))


def test_a_phase_lr_from_the_cli_trains_a_branch_of_the_default_job(work):
    cwd, run = work
    base = cwd / BASE
    before = listing(base)
    proc = run("phase=reasoning", "phase.lr.peak=3e-5")
    branch = cwd / "runs" / "tiny-single-cpu-reasoning-lr3e-05"
    assert f"branches off the base run from {BASE / 'checkpoints' / GENERAL_FINAL}" in proc.stdout

    # it started from the base run's general final checkpoint, and never wrote into the base run
    (resumed,) = events(branch, "resume")
    assert resumed["handoff"] and resumed["path"] == str(BASE / "checkpoints" / GENERAL_FINAL)
    assert listing(base) == before
    own = sorted(p.name for p in (branch / "checkpoints").glob("step_*"))
    assert own == [GENERAL_FINAL, "step_00000036-phase-reasoning-final"]  # its own copy of the start, its end
    copied, original = (d / "checkpoints" / GENERAL_FINAL / "weights.safetensors" for d in (branch, base))
    assert copied.read_bytes() == original.read_bytes()

    # reasoning only, global steps continuing general's, cosine from the CLI peak to peak / 3
    train = train_records(branch)
    assert [r["step"] for r in train] == list(range(29, 37)) and {r["phase"] for r in train} == {"reasoning"}
    assert [r["lr"] for r in train] == pytest.approx([cosine(3e-5, 1e-5, i, 8) for i in range(8)])
    # same weights and same data as the base run's reasoning phase: the first loss (before any update)
    # is bitwise the base run's; from the general weights, not a fresh init (ln 4096 = 8.3; 28 steps on the
    # English-Chinese general mix take reasoning's first loss ~0.45 below it)
    base_reasoning = [r for r in train_records(base) if r["phase"] == "reasoning"]
    assert train[0]["loss"] == base_reasoning[0]["loss"] < train_records(base)[0]["loss"] - 0.3
    summary = json.loads((branch / "summary.json").read_text())
    (phase,) = summary["phases"]
    assert phase["phase"] == "reasoning" and phase["val_loss_last"] > 0

    # the same command again resumes the branch from its own checkpoints: nothing left to train
    again = run("phase=reasoning", "phase.lr.peak=3e-5")
    assert "nothing to train" in again.stdout
    resumed = events(branch, "resume")
    assert len(resumed) == 2 and not resumed[1]["handoff"]
    assert resumed[1]["path"].endswith("step_00000036-phase-reasoning-final")
    assert len(train_records(branch)) == 8 and listing(base) == before


def test_an_lr_sweep_of_one_phase_writes_one_row_per_lr_with_its_final_validation_loss(work):
    cwd, run = work
    run("-m", "phase=reasoning", "phase.lr.peak=1e-5,3e-5,1e-4", "hydra.sweep.dir=lr_sweep")
    sweep = cwd / "lr_sweep"
    rows = {r["label"]: r for r in csv.DictReader((sweep / "summary.csv").read_text().splitlines())}
    assert sorted(rows) == ["phase.lr.peak=0.0001", "phase.lr.peak=1e-05", "phase.lr.peak=3e-05"]
    for label, row in rows.items():
        job = sweep / row["job"]
        summary = json.loads((job / "summary.json").read_text())
        assert row["status"] == "ok" and float(row["val_loss"]) == summary["phases"][-1]["val_loss_last"]
        peak = float(label.split("=")[1])
        assert train_records(job)[-1]["lr"] == pytest.approx(peak / 3)   # each branch its own LR
        assert events(job, "resume")[0]["path"] == str(BASE / "checkpoints" / GENERAL_FINAL)
    assert len({row["val_loss"] for row in rows.values()}) == 3
    md = (sweep / "summary.md").read_text().splitlines()
    assert "val_loss" in md[0] and len(md) == 2 + 3
