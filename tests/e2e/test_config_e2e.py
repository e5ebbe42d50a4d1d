"""Every parallel layout on every hardware option, per model, composed and validated in this process:
hundreds of configs, each planned, minutes in all (the slow suite's)."""
import itertools

import pytest

from pretrain.config import validate
from pretrain.config.resolved import ResolvedRun
from pretrain.plan.verdict import verdict
from tests.helpers.launch_checks import accepted_by_training
from tests.helpers.repo import options


@pytest.mark.parametrize("model", [pytest.param(m, marks=[pytest.mark.slow]) for m in options("model")])
def test_every_parallel_hardware_combination_validates_or_explains(compose_many, model):
    """Every layout on every hardware, per model (tiny in the default suite, the other models in the
    slow one): valid and plannable, or every problem one clear line; and every one a dry run calls
    "ok" passes the training path's own steps."""
    from pretrain.plan.planner import plan

    base = compose_many(["dry_run=true", f"model={model}"])
    nodes = {g: {o: compose_many([f"{g}={o}"])[g] for o in options(g)} for g in ("parallel", "hardware")}
    valid = ok = 0
    for p, h in itertools.product(nodes["parallel"], nodes["hardware"]):
        cfg = base.copy()
        cfg.parallel, cfg.hardware = nodes["parallel"][p], nodes["hardware"][h]
        found = validate.problems(cfg)
        for line in found:
            assert "\n" not in line, line
            assert any(k in line for k in ("model.", "parallel", "train.", "hardware", "phase", "data.")), line
        if not found:
            valid += 1
            run = ResolvedRun.of(cfg)
            planned = plan(run)
            assert planned.params_total > 0
            # what a dry run or sweep row calls "ok", training accepts (a plan that does not fit is
            # never ok: its verdict's search for fitting layouts is skipped here)
            if planned.fits and verdict(run.with_plan(planned))[0] == "ok":
                accepted_by_training(cfg)
                ok += 1
    assert valid >= 3   # the layouts in conf/ are meant to be usable, not just rejected
    assert ok >= (2 if model == "tiny" else 0)   # tiny on the CPU options at least
