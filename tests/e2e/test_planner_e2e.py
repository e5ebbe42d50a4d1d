"""Planner: it loads no mindspore (a fresh interpreter), and every model x parallel x hardware option
plans (hundreds of plans: the slow suite's)."""
import json
import math
import subprocess
import sys

import pytest

from pretrain.config.compose import composer
from pretrain.config.resolved import ResolvedRun
from pretrain.plan import planner
from tests.helpers.repo import REPO, options


def test_planner_does_not_import_mindspore():
    code = ("import sys; import pretrain.plan.planner, pretrain.plan; "
            "assert 'mindspore' not in sys.modules and 'mindformers' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


@pytest.mark.slow   # moved out of the default suite's 5 minutes (still run by CI)
def test_plan_every_model_parallel_hardware_option():
    with composer() as run:
        base = run([])
        nodes = {g: {o: run([f"{g}={o}"])[g] for o in options(g)} for g in ("model", "parallel", "hardware")}
        direct = run(["model=qwen3_30b_a3b", "parallel=dp8tp2pp4ep8", "hardware=ascend910b_4x8"])
    assert set(nodes["model"]) >= {"tiny", "llama3_8b", "qwen3_8b", "qwen3_30b_a3b", "llama3_70b",
                                   "pangu_ultra_135b"}
    # Swapping group nodes into one composed tree gives what composing the triple would (checked
    # once below) and keeps hundreds of combinations within seconds.
    plans, cfg = {}, base
    for m, model in nodes["model"].items():
        cfg.model = model
        for par_name, par in nodes["parallel"].items():
            cfg.parallel = par
            for hw_name, hw in nodes["hardware"].items():
                cfg.hardware = hw
                p = planner.plan(ResolvedRun.of(cfg))
                json.dumps(p.to_dict(), allow_nan=False)
                assert p.peak_gb > 0 and p.step_s > 0 and math.isfinite(p.total_days)
                plans[m, par_name, hw_name] = p
    swapped = plans["qwen3_30b_a3b", "dp8tp2pp4ep8", "ascend910b_4x8"]
    assert swapped.to_dict() == planner.plan(ResolvedRun.of(direct)).to_dict()
    text = planner.format_plan(plans["pangu_ultra_135b", "dp8tp8pp16", "ascend910b_128x8"])
    assert len(text.splitlines()) <= 30
