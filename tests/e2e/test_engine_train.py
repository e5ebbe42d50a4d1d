"""The CPU proof of train.engine=mindformers: MindFormers' own Trainer, from the exported
run_dir/mindformers_general.yaml, with pretrain/model/cpu_compat.py applied, trains the tiny model
(shrunk) on our shards; a second start resumes from its own checkpoint and continues the curve;
Two data-parallel CPU processes under msrun are refused by the rulebook with the blocker
(tests/test_rulebook.py): MindFormers 1.9.0 runs data parallel only as semi_auto_parallel, which
MindSpore refuses on CPU."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from pretrain.config.phases import phase_steps, phases as phases_of
from pretrain.train.schedule import curriculum
from tests.helpers import cli
from tests.helpers.models import SMALL_MODEL

pytestmark = pytest.mark.slow

# 0.6M parameters at seq 64 (tests/test_launch_msrun.py's shrink); general = 0.7 x 30000 tokens
# = 41 steps of 8 x 64 tokens
SMALL = [
    "phase=general",
    "train.engine=mindformers",
    *SMALL_MODEL,
    "train.eval_every=0",
    "train.total_tokens=30000",
    "train.save_every_steps=10",
]
STEPS = 41


@pytest.fixture
def start(data_cache, tmp_path):
    def run(*args):
        out = open(tmp_path / f"out_{len(list(tmp_path.glob('out_*')))}.txt", "w+")  # a file: a pipe left
        proc = cli.start(*args, "run_dir=run", cwd=tmp_path, cache=data_cache, stdout=out,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True)
        proc.out = out  # unread would block the run
        return proc

    return run


def finish(proc) -> str:
    proc.wait(timeout=900)
    proc.out.seek(0)
    out = proc.out.read()
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out[-5000:]}"
    return out


def losses(run: Path):
    """The loss log's rows, split into the starts that wrote them (a start begins at a lower step)."""
    path = run / "mindformers" / "general" / "losses.jsonl"
    starts = []
    for row in map(json.loads, path.read_text().splitlines()):
        if not starts or row["step"] <= starts[-1][-1]["step"]:
            starts.append([])
        starts[-1].append(row)
    return starts


def our_lr(run: Path):
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(run / "config.yaml")
    (phase,) = phases_of(cfg)
    (lr,) = curriculum([phase], [phase_steps(cfg, phase)])
    return lr


def test_mindformers_trainer_trains_from_the_exported_yaml_and_resumes_from_its_own_checkpoint(
    start, tmp_path, data_cache
):
    run = tmp_path / "run"
    first = start(*SMALL)
    log = run / "mindformers" / "general" / "losses.jsonl"
    deadline = time.time() + 600
    while time.time() < deadline and first.poll() is None:
        if log.is_file() and len(log.read_text().splitlines()) >= 23:  # past the step-20 checkpoint
            break
        time.sleep(0.2)
    assert first.poll() is None, (first.out.seek(0), first.out.read()[-4000:])
    os.killpg(first.pid, signal.SIGKILL)  # a crash, not a graceful stop
    first.wait()
    out = finish(start(*SMALL))
    assert "engine     mindformers" in out
    killed, resumed = losses(run)
    assert [r["step"] for r in killed[:23]] == list(range(1, 24))
    assert [r["step"] for r in resumed] == list(range(21, STEPS + 1)), "resumed after its step-20 checkpoint"
    # same weights, optimizer and data position: steps 21.. repeat what the killed start computed
    for a, b in zip(killed[20:23], resumed):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4), (a, b)
    curve = killed[:20] + resumed
    assert len(curve) == STEPS
    head, tail = [r["loss"] for r in curve[:5]], [r["loss"] for r in curve[-5:]]
    assert sum(tail) / 5 < sum(head) / 5 - 0.5, (head, tail)
    lr = our_lr(run)  # the LR MindFormers' step reported is our schedule's at every step
    for row in curve:
        assert row["lr"] == pytest.approx(lr.at(row["step"] - 1), rel=1e-5)
    summary = json.loads((run / "summary.json").read_text())
    (phase,) = summary["phases"]
    assert summary["engine"] == "mindformers" and phase["resumed_at"] == 20 and phase["steps"] == STEPS - 20
    # each start recorded MindFormers' step as this hardware's calibration point of its own engine
    points = json.loads((data_cache / "calibration" / "cpu.json").read_text())
    assert any(p["shape"].endswith("-mindformers") and p["step_s"] > 0 and p["seq"] == 64
               for p in points), points
    print(
        f"\nmindformers engine: {STEPS} steps, loss {curve[0]['loss']:.3f} -> {curve[-1]['loss']:.3f}, "
        f"resumed at step 20, {phase['tokens_per_s']:.0f} tokens/s"
    )


def test_mindformers_trainer_chains_the_curriculum_with_our_lr(start, tmp_path):
    """phase=all: each phase is a MindFormers run of its own (one Trainer per process), starting from the
    previous phase's final checkpoint (weights, Adam moments, global step) on its own data, at our LR."""
    from omegaconf import OmegaConf

    out = finish(start(*[a for a in SMALL if a != "phase=general"]))
    run = tmp_path / "run"
    cfg = OmegaConf.load(run / "config.yaml")
    plist = phases_of(cfg)
    ours = curriculum(plist, [phase_steps(cfg, p) for p in plist])
    ends = []
    for phase, lr in zip(plist, ours):
        rows = [
            json.loads(x)
            for x in (run / "mindformers" / phase.name / "losses.jsonl").read_text().splitlines()
        ]
        assert [r["step"] for r in rows] == list(range(1, lr.steps + 1)), phase.name
        for r in rows:
            assert r["lr"] == pytest.approx(lr.at(r["step"] - 1), rel=1e-5), (phase.name, r)
        ends.append((rows[0]["loss"], rows[-1]["loss"]))
    general, reasoning, anneal = ends
    assert general[1] < general[0] - 0.5
    assert reasoning[0] < general[0] - 0.5 and anneal[0] < general[0] - 0.5, (
        "each phase starts from the trained weights"
    )
    summary = json.loads((run / "summary.json").read_text())
    assert [p["phase"] for p in summary["phases"]] == ["general", "reasoning", "anneal"], out[-3000:]
