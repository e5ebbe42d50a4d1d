"""`python -m pretrain` end to end on CPU: the real MindFormers model, real sample corpus, three
phases. One phase run alone, as a branch of this default job: test_branch_e2e.py."""

import json
import math
from pathlib import Path

import pytest

from pretrain.train.metrics import read_metrics
from tests.helpers import cli

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
        return cli.run(*args, cwd=tmp_path, cache=cache, timeout=900)

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

    # an honest console: the compile said, a line per phase boundary and per save, no library noise
    console = proc.stdout + proc.stderr
    assert "general: compiling the training graph" in console
    assert "phase general done: steps 1-34" in console and "run: 44 of 49 steps" in console
    assert "saved step 34 in " in console and "step_00000034-phase-general-final" in console
    assert "hyper_parallel" not in console and "[INFO]" not in console
    assert "hyper_parallel" in (run / "mindformers_output" / "import.log").read_text()

    # started again: nothing to train, said once; the finished run's summary stays
    again = ok(pretrain(f"train.total_tokens={tokens}", "train.eval_every=10"))
    assert "nothing to train" in again.stdout and "resumes" not in again.stdout and "trained" not in again.stdout
    assert json.loads((run / "summary.json").read_text()) == summary

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
