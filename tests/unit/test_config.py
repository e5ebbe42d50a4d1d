"""Composition and cross-field validation, in-process (no mindspore import)."""
import pytest
from omegaconf import OmegaConf

from pretrain.config.phases import phases as phases_of
from pretrain.config import validate
from pretrain.config.errors import PretrainConfigError
from tests.helpers.repo import options

GROUPS = ["model", "parallel", "phase", "hardware", "data"]


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in options(g)])
def test_every_option_composes_with_the_defaults(compose_many, group, option):
    cfg = compose_many([f"{group}={option}", "dry_run=true"])
    assert OmegaConf.missing_keys(cfg) == set()
    resolved = OmegaConf.to_container(cfg, resolve=True)   # every interpolation resolves
    if group == "phase":
        assert [p.name for p in phases_of(cfg)] == ([option] if option != "all" else
                                                          ["general", "reasoning", "anneal"])
    else:
        assert resolved[group]["name"] == option
    for line in validate.problems(cfg):
        assert "\n" not in line and len(line) < 400


def test_layout_message_names_every_factor(compose_many):
    cfg = compose_many(["model=llama3_70b", "parallel=dp8tp4pp2", "hardware=ascend910b_4x8", "dry_run=true"])
    (line,) = [p for p in validate.problems(cfg) if p.startswith("parallel:")]
    assert "dp(8) * tp(4) * pp(2) * cp(1) = 64 != devices(32)" in line
    assert "hardware=ascend910b_4x8" in line


def test_derived_values_come_from_resolvers(compose_many):
    cfg = compose_many(["model=llama3_70b", "parallel=dp8tp4pp2", "hardware=ascend910b_8x8"])
    assert cfg.train.global_batch_size == 1024
    assert cfg.train.grad_accum == 1024 // (1 * 8)
    cfg = compose_many(["model=llama3_70b", "parallel=dp8tp4pp2", "parallel.micro_batch_size=2"])
    assert cfg.train.grad_accum == 64


def test_phase_lr_from_the_cli(compose_many):
    cfg = compose_many(["phase=reasoning", "phase.lr.peak=3e-5"])
    (only,) = phases_of(cfg)
    assert only.name == "reasoning" and only.lr.peak == 3e-5
    cfg = compose_many(["phase.anneal.lr.end=2e-6"])
    assert [p.name for p in phases_of(cfg)] == ["general", "reasoning", "anneal"]
    assert phases_of(cfg)[2].lr.end == 2e-6


def test_uneven_pipeline_split_is_accepted_when_explicit(compose_many):
    args = ["model=pangu_ultra_135b", "parallel=dp8tp8pp16", "hardware=ascend910b_128x8", "parallel.vpp=1"]
    assert any("num_layers(94)" in p for p in validate.problems(compose_many(args)))
    split = "[5," + "6," * 14 + "5]"
    assert validate.problems(compose_many(args + [f"parallel.pipeline_layers={split}"])) == []
    bad = compose_many(args + ["parallel.pipeline_layers=[6,6]"])
    assert any("parallel.pipeline_layers=[6, 6]" in p for p in validate.problems(bad))


def test_check_raises_typed_error_with_all_problems(compose_many):
    cfg = compose_many(["parallel.dp=3", "parallel.tp=0"])
    with pytest.raises(PretrainConfigError) as err:
        validate.check(cfg)
    assert "parallel.tp=0 must be in [1, 1024]" in str(err.value)


def test_moe_rules(compose_many):
    ok = compose_many(["model=qwen3_30b_a3b", "parallel=dp8ep8", "hardware=ascend910b_1x8"])
    assert validate.problems(ok) == []
    bad = compose_many(["model=qwen3_30b_a3b", "parallel=dp8ep8", "hardware=ascend910b_1x8", "parallel.ep=3"])
    found = validate.problems(bad)
    assert any("model.num_experts(128) % parallel.ep(3)" in p for p in found)
    assert any("parallel.ep(3) must divide dp(8)" in p for p in found)
