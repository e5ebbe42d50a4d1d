"""The run resolved once (pretrain/config/resolved.py): what the planner, the launch, the engines and
the loop are handed instead of the config."""
import dataclasses

import pytest
from omegaconf import OmegaConf
from omegaconf.errors import ReadonlyConfigError

from pretrain.config.layout import ParallelLayout
from pretrain.config.phases import phase_steps, phase_tokens, phases
from pretrain.config.resolved import ResolvedRun
from pretrain.plan.planner import plan


@pytest.mark.parametrize("overrides", [
    [],
    ["model=llama3_70b", "parallel=dp8tp4pp2", "hardware=ascend910b_8x8"],
    ["phase=reasoning", "parallel=dp2", "hardware=cpu_2proc"],
])
def test_a_resolved_run_holds_the_layout_and_each_phase_with_its_steps(compose_many, overrides):
    cfg = compose_many(overrides)
    run = ResolvedRun.of(cfg)
    assert run.layout == ParallelLayout.from_config(cfg)
    assert run.phase_names == tuple(str(p.name) for p in phases(cfg))
    assert [(p.tokens, p.steps) for p in run.phases] == [(phase_tokens(cfg, p), phase_steps(cfg, p))
                                                         for p in phases(cfg)]
    assert all(p.steps > 0 for p in run.phases)
    assert run.phase(run.phase_names[-1]) is run.phases[-1] and run.phase("no such phase") is None


def test_its_config_is_read_only_and_the_callers_stays_theirs(compose_many):
    cfg = compose_many([])
    run = ResolvedRun.of(cfg)
    with pytest.raises(ReadonlyConfigError):
        run.cfg.train.seed = 7          # nothing below the app changes the config it was resolved from
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.layout = None
    cfg.train.seed = 7                  # a sweep's next layout: the caller's own config
    assert run.cfg.train.seed != 7 and OmegaConf.to_container(run.cfg)["train"]["seed"] == 1234


def test_the_planner_plans_the_phases_it_is_handed_not_the_configs_again(compose_many):
    run = ResolvedRun.of(compose_many([]))
    planned = plan(run)
    longer = tuple(dataclasses.replace(p, tokens=2 * p.tokens) for p in run.phases)
    doubled = dataclasses.replace(run, phases=longer)
    again = plan(doubled)
    assert [p.name for p in again.phases] == list(run.phase_names)
    assert [b.days for b in again.phases] == pytest.approx([2 * a.days for a in planned.phases])
    assert run.with_plan(planned).plan is planned and run.plan is None
