"""One rulebook: ranges on every numeric key, "plan only" for what nothing here trains, no launch of
a plan that does not fit (with layouts that do), and dry runs that give the launch's verdict."""
import copy
import math

import pytest
from omegaconf import OmegaConf

from pretrain.config.layout import engine_of
from pretrain.config import ranges, schema, validate
from pretrain.config.errors import PretrainConfigError
from pretrain.config.resolved import ResolvedRun
from pretrain.plan.planner import plan as make_plan
from pretrain.plan.report import format_plan
from pretrain.plan.verdict import memory_problems

GROUPS = {"model": schema.ModelConfig, "parallel": schema.ParallelConfig, "hardware": schema.HardwareConfig,
          "data": schema.DataConfig, "train": schema.TrainConfig, "plan": schema.PlanConfig,
          "resilience": schema.ResilienceConfig, "phase.general": schema.PhaseConfig}
NUMERIC = [(key, f, kind) for group, node in GROUPS.items() for key, f, kind in ranges.numeric_fields(node, group + ".")]
WALK = [(key, value) for key, f, kind in NUMERIC if ranges.DERIVED not in f.metadata
        for value in (0, -1, 10**18 if kind is int else 1e18)]
BIG = ["model=llama3_70b", "parallel=dp8tp4pp2", "hardware=ascend910b_8x8"]


@pytest.fixture(scope="module")
def default_cfg(compose_many):
    return compose_many(["dry_run=true"])


def test_every_numeric_key_of_the_schema_declares_its_range():
    undeclared = [key for key, f, _ in NUMERIC
                  if ranges.RANGE not in f.metadata and ranges.DERIVED not in f.metadata]
    assert len(NUMERIC) > 60 and undeclared == []


def _sane(plan) -> bool:
    numbers = [plan.params_total, plan.flops_per_token, plan.step_s, plan.tokens_per_s, plan.total_days,
               plan.peak_gb, *(p.steps for p in plan.phases)]
    return (all(math.isfinite(x) for x in numbers) and plan.params_total > 0 and 0 < plan.mfu <= 1
            and all(p.steps >= 1 for p in plan.phases) and plan.total_days < 1e6)


@pytest.mark.parametrize("key,value", WALK, ids=[f"{k}={v:g}" for k, v in WALK])
def test_numeric_walk_refuses_with_the_key_or_plans_sanely(default_cfg, key, value):
    cfg = copy.deepcopy(default_cfg)
    OmegaConf.update(cfg, key, value)
    found = validate.problems(cfg)
    if found:
        assert any(key.split(".")[-1] in line for line in found), found
        return
    run = ResolvedRun.of(cfg)
    plan = make_plan(run)      # accepted: the plan must make sense, and the launch verdicts must not crash
    assert _sane(plan), (key, value, plan.params_total, plan.mfu, plan.total_days)
    validate.training_problems(cfg)
    memory_problems(run.with_plan(plan))


def test_model_parallel_layouts_go_to_the_mindformers_engine(compose_many):
    cfg = compose_many([*BIG, "parallel.zero_stage=0"])
    assert validate.problems(cfg) == [] and engine_of(cfg) == "mindformers"
    assert validate.training_problems(cfg) == []            # MindFormers' trainer runs it on Ascend
    ours = compose_many([*BIG, "parallel.zero_stage=0", "train.engine=pretrain"])
    (line,) = validate.training_problems(ours)
    assert "tp(4) pp(2) > 1 with train.engine=pretrain" in line and "train.engine=mindformers" in line
    with pytest.raises(PretrainConfigError, match="tp\\(4\\) pp\\(2\\)"):
        validate.check_trainable(ours)
    zero = compose_many(["model=llama3_8b", "parallel=dp8", "hardware=ascend910b_1x8"])
    assert engine_of(zero) == "mindformers" and validate.training_problems(zero) == []
    dp2 = compose_many(["parallel=dp2", "hardware=cpu_2proc"])
    assert engine_of(dp2) == "pretrain" and validate.training_problems(dp2) == []
    one = compose_many(["train.engine=mindformers"])
    assert engine_of(one) == "mindformers" and validate.training_problems(one) == []   # the CPU proof


def test_model_parallel_on_cpu_is_refused_naming_mindsporess_blocker(compose_many):
    cfg = compose_many(["model=llama3_70b", "parallel=dp1tp8pp8", "hardware=cpu", "hardware.devices_per_node=64"])
    assert engine_of(cfg) == "mindformers"
    found = validate.training_problems(cfg)
    assert any("tp(8) pp(8) > 1 on hardware.device=cpu" in ln and "libmindspore_frontend.so" in ln
               and "only support Ascend/GPU backend" in ln for ln in found), found
    (dp2,) = validate.training_problems(compose_many(["parallel=dp2", "hardware=cpu_2proc",
                                                      "train.engine=mindformers"]))
    assert "BaseTrainer._check_global_batch_size_for_auto_parallel" in dp2 and "_valid_parallel_config" in dp2
    assert "only support Ascend/GPU backend" in dp2 and "train.engine=pretrain" in dp2
    typo = compose_many(["train.engine=megatron"])
    assert any("train.engine='megatron' must be one of auto, pretrain, mindformers" in ln
               for ln in validate.problems(typo))


def test_target_days_prints_the_devices_that_finish_in_time(compose_many):
    cfg = compose_many(["model=llama3_8b", "parallel=dp8", "hardware=ascend910b_1x8", "plan.target_days=200"])
    base = make_plan(ResolvedRun.of(compose_many(["model=llama3_8b", "parallel=dp8",
                                                  "hardware=ascend910b_1x8"])))
    plan = make_plan(ResolvedRun.of(cfg))
    t = plan.target
    assert t.reachable and t.dp == math.ceil(8 * base.total_days / 200) and t.devices == t.dp
    assert f"target     200 days: {t.devices} devices" in format_plan(plan)
    capped = make_plan(ResolvedRun.of(compose_many([*BIG, "plan.target_days=1"]))).target
    assert not capped.reachable and capped.dp == capped.max_dp == 1024


def test_mfu_is_labelled_assumed(compose_many):
    text = format_plan(make_plan(ResolvedRun.of(compose_many([]))))
    assert "MFU" in text and "(assumed: train.efficiency=0.45" in text
