"""`python -m pretrain` end to end on CPU: the real MindFormers model, real sample corpus, three
phases; and one phase run alone continuing from the previous phase's final checkpoint."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pretrain.train.metrics import read_metrics

pytestmark = pytest.mark.slow

RUN = Path("runs") / "tiny-single-cpu"


@pytest.fixture(scope="module")
def cache(data_cache):
    """The session's prepared sample corpus (preparing it takes ~30-60 s, once)."""
    return data_cache


@pytest.fixture
def pretrain(cache, tmp_path):
    """Run `python -m pretrain ARGS` in tmp_path with the module's data cache."""

    def run(*args):
        env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
        env["PRETRAIN_CACHE"] = str(cache)
        return subprocess.run(
            [sys.executable, "-m", "pretrain", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )

    return run


def ok(proc):
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


def events(run):
    return [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]


def test_default_job_trains_three_phases_with_the_configured_schedule_and_falling_loss(
    pretrain, compose_many, tmp_path
):
    tokens = 98304  # 48 steps of 8 x 256 tokens: general 34, reasoning 10, anneal 5 (rounded)
    proc = ok(pretrain(f"train.total_tokens={tokens}", "train.eval_every=10"))
    run = tmp_path / RUN
    cfg = compose_many([f"train.total_tokens={tokens}"])
    peak = cfg.train.lr_peak

    # three phases, in order, contiguous global steps, each ending in its tagged checkpoint
    summary = json.loads((run / "summary.json").read_text())
    assert [p["phase"] for p in summary["phases"]] == ["general", "reasoning", "anneal"]
    steps = [p["steps"] for p in summary["phases"]]
    assert steps == [round(f * tokens / 2048) for f in (0.7, 0.2, 0.1)] == [34, 10, 5]
    train = [r for r in read_metrics(run / "metrics.jsonl") if r["kind"] == "train"]
    assert [r["step"] for r in train] == list(range(1, sum(steps) + 1))
    assert [r["phase"] for r in train] == ["general"] * 34 + ["reasoning"] * 10 + ["anneal"] * 5
    saves = [e["tag"] for e in events(run) if e["kind"] == "save" and e.get("tag")]
    assert saves == ["phase-general-final", "phase-reasoning-final", "phase-anneal-final"]

    # the LR at sampled steps, from the phase configs (general: warmup 5 % then cosine to 0.3·peak;
    # reasoning: continue, cosine to 0.1·peak; anneal: continue, linear to 0.01·peak)
    lr = {r["step"]: r["lr"] for r in train}
    warmup = round(0.05 * 34)  # 2 steps
    assert lr[1] == pytest.approx(peak / warmup) and lr[warmup] == pytest.approx(peak)
    mid = warmup + 16  # half of the 32 decay steps
    assert lr[mid] == pytest.approx(0.3 * peak + 0.7 * peak * 0.5 * (1 + math.cos(math.pi * 16 / 32)))
    assert lr[34] == pytest.approx(0.3 * peak)
    assert 0.1 * peak < lr[35] < lr[34] and lr[44] == pytest.approx(0.1 * peak)
    assert lr[45] == pytest.approx(0.1 * peak + (0.01 - 0.1) * peak / 5) and lr[49] == pytest.approx(
        0.01 * peak
    )

    # the loss falls within every phase; validation is logged with the metrics
    for phase in summary["phases"]:
        assert phase["loss_end_mean"] < phase["loss_start_mean"], phase
    general = summary["phases"][0]
    assert general["loss_first"] > 8.0 and general["loss_last"] < general["loss_first"] - 1.0
    val = [r for r in read_metrics(run / "metrics.jsonl") if r["kind"] == "val"]
    assert [r["step"] for r in val] == [10, 20, 30, 34, 44, 49]
    for key in ("grad_norm", "loss_scale", "tokens_per_s", "mfu", "step_time_s", "host_mem_gb"):
        assert all(r[key] > 0 for r in train), key

    # the run's files
    assert (run / "metrics.jsonl").stat().st_size > 0
    event_files = list((run / "tensorboard").glob("events.out.tfevents.*"))
    assert event_files and all(f.stat().st_size > 0 for f in event_files)
    png = (run / "loss_curve.png").read_bytes()
    assert png[:4] == b"\x89PNG" and len(png) > 10_000
    assert "general" in proc.stdout and "anneal" in proc.stdout and "loss first" in proc.stdout

    # what MindFormers builds from the exported yaml is the model the trainer trained and saved
    _same_parameters_as_the_trained_checkpoint(run, cfg)


def _same_parameters_as_the_trained_checkpoint(run, cfg):
    import mindspore as ms
    from mindformers.core.context.build_context import build_context
    from mindformers.models.build_model import build_network
    from mindformers.tools.register import MindFormerConfig

    from pretrain.model import cpu_compat
    from pretrain.plan.planner import model_shape, param_count

    loaded = MindFormerConfig(str(run / "mindformers.yaml"))
    build_context(loaded)
    cpu_compat.apply()
    net = build_network(loaded.model)
    built = {p.name: tuple(p.shape) for p in net.trainable_params()}
    final = next((run / "checkpoints").glob("step_*-phase-anneal-final"))
    saved = ms.load_checkpoint(str(final / "weights.safetensors"), format="safetensors")
    trained = {k: tuple(v.shape) for k, v in saved.items() if f"adam_m.{k}" in saved}  # the optimised weights
    assert built == trained
    assert sum(math.prod(s) for s in built.values()) == param_count(model_shape(cfg.model)).total


SMALL = [
    "model.hidden_size=128",
    "model.num_layers=2",
    "model.num_kv_heads=2",
    "model.ffn_hidden_size=256",
    "train.total_tokens=61440",
    "train.eval_every=0",
]  # general 21 steps, reasoning 6


def test_a_phase_run_alone_continues_from_the_previous_phases_final_checkpoint(pretrain, tmp_path):
    missing = pretrain("phase=reasoning", *SMALL)
    assert missing.returncode == 2
    error = [line for line in missing.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "run phase=general first" in error[0]

    ok(pretrain("phase=general", *SMALL))
    ok(pretrain("phase=reasoning", *SMALL, "phase.lr.peak=5e-4"))  # a CLI-set peak
    run = tmp_path / RUN
    train = [r for r in read_metrics(run / "metrics.jsonl") if r["kind"] == "train"]
    general = [r for r in train if r["phase"] == "general"]
    reasoning = [r for r in train if r["phase"] == "reasoning"]
    assert len(general) == 21 and len(reasoning) == 6
    assert reasoning[0]["step"] == general[-1]["step"] + 1  # global steps continue
    # cosine from the CLI peak to reasoning's end (0.1 x model lr_peak) over its 6 steps
    assert reasoning[0]["lr"] == pytest.approx(1e-4 + 4e-4 * 0.5 * (1 + math.cos(math.pi / 6)))
    assert reasoning[-1]["lr"] == pytest.approx(1e-4)
    resumed = [e for e in events(run) if e["kind"] == "resume"]
    assert len(resumed) == 1 and resumed[0]["path"].endswith("phase-general-final")
    # it trained on from the general weights, not from a fresh init (ln 4096 ≈ 8.3)
    assert reasoning[0]["loss"] < general[0]["loss"] - 0.5
