"""The curriculum's LR schedule (pure Python) and how the runner sizes phases."""

import pytest
from omegaconf import OmegaConf

from pretrain.config.errors import PretrainConfigError
from pretrain.config import validate
from pretrain.config.validate import phase_steps
from pretrain.config.branch import previous_phase
from pretrain.train.schedule import curriculum, lr_at, phase_lr


def lr_cfg(**kw):
    base = {
        "peak": 1e-3,
        "end": 1e-4,
        "warmup_fraction": 0.0,
        "schedule": "cosine",
        "wsd_decay_fraction": 0.2,
    }
    base.update(kw)
    return OmegaConf.create(base)


def test_warmup_is_linear_from_start_to_peak_then_cosine_reaches_end_on_the_last_step():
    p = phase_lr("general", 100, lr_cfg(warmup_fraction=0.1), start=0.0)
    assert p.warmup_steps == 10
    assert p.at(0) == pytest.approx(1e-4)  # 1/10 of the way up
    assert p.at(4) == pytest.approx(5e-4)
    assert p.at(9) == pytest.approx(1e-3)  # last warmup step is the peak
    # cosine over the 90 decay steps: half way down at its midpoint, `end` exactly at the last step
    assert p.at(9 + 45) == pytest.approx((1e-3 + 1e-4) / 2)
    assert p.at(99) == pytest.approx(1e-4)
    assert p.final == pytest.approx(1e-4)
    decay = [p.at(i) for i in range(9, 100)]
    assert all(a >= b for a, b in zip(decay, decay[1:]))


@pytest.mark.parametrize("schedule", ["linear", "constant", "wsd"])
def test_other_shapes(schedule):
    p = phase_lr("x", 50, lr_cfg(schedule=schedule), start=0.0)
    if schedule == "linear":
        assert p.at(24) == pytest.approx(1e-3 + (1e-4 - 1e-3) * 25 / 50)
        assert p.final == pytest.approx(1e-4)
    elif schedule == "constant":
        assert {p.at(i) for i in range(50)} == {1e-3}
    else:  # stable for the first 80 % of the steps, then linear to end over the last 10 steps
        assert [p.at(i) for i in range(40)] == [1e-3] * 40
        assert p.at(44) == pytest.approx(1e-3 + (1e-4 - 1e-3) * 5 / 10)
        assert p.final == pytest.approx(1e-4)


def test_curriculum_is_continuous_and_a_null_peak_continues_from_the_previous_phase():
    phases = [
        OmegaConf.create({"name": "general", "lr": lr_cfg(peak=1e-3, end=3e-4, warmup_fraction=0.05)}),
        OmegaConf.create({"name": "reasoning", "lr": lr_cfg(peak=None, end=1e-4)}),
        OmegaConf.create({"name": "anneal", "lr": lr_cfg(peak=None, end=1e-5, schedule="linear")}),
    ]
    general, reasoning, anneal = curriculum(phases, [200, 60, 30])
    assert reasoning.start == reasoning.peak == pytest.approx(general.final) == pytest.approx(3e-4)
    assert anneal.start == pytest.approx(1e-4)
    # the first step of a continuing phase is one decay step below the previous phase's last LR
    assert 1e-4 < reasoning.at(0) < 3e-4 and reasoning.at(0) > reasoning.at(1)
    assert anneal.at(0) == pytest.approx(1e-4 + (1e-5 - 1e-4) / 30)
    assert anneal.final == pytest.approx(1e-5)


def test_an_explicit_peak_after_a_phase_rewarms_from_where_it_ended():
    p = phase_lr("reasoning", 20, lr_cfg(peak=5e-4, end=1e-4, warmup_fraction=0.25), start=2e-4)
    assert p.at(0) == pytest.approx(2e-4 + 3e-4 / 5)
    assert p.at(4) == pytest.approx(5e-4)


def test_bad_schedules_are_named(compose_many):
    bad = compose_many(["phase=general", "phase.lr.schedule=step"])
    assert "phase.lr.schedule='step' must be one of cosine, linear, constant, wsd" in validate.problems(bad)
    with pytest.raises(PretrainConfigError, match="set phase.lr.peak"):
        phase_lr("reasoning", 10, lr_cfg(peak=None), start=0.0)
    with pytest.raises(ValueError, match="outside phase"):
        lr_at(phase_lr("general", 10, lr_cfg(), start=0.0), 10)


def test_phase_steps_round_tokens_over_one_global_batch(compose_many):
    cfg = compose_many(["train.total_tokens=100000"])
    per_step = cfg.train.global_batch_size * cfg.model.seq_length
    assert phase_steps(cfg, cfg.phase.general) == round(0.7 * 100000 / per_step)
    cfg = compose_many(["phase=anneal", "phase.token_fraction=null", f"phase.tokens={per_step * 7.4}"])
    assert phase_steps(cfg, cfg.phase) == 7
    cfg = compose_many(["train.total_tokens=1000"])
    assert phase_steps(cfg, cfg.phase.anneal) == 0
    assert any("phase.anneal: 100 tokens < one step" in p for p in validate.problems(cfg))


def test_a_phase_run_alone_continues_from_its_predecessor():
    assert previous_phase("general") is None
    assert previous_phase("reasoning") == "general"
    assert previous_phase("anneal") == "reasoning"
    assert previous_phase("my_finetune") is None
