"""One rulebook: ranges on every numeric key, "plan only" for what nothing here trains, no launch of
a plan that does not fit (with layouts that do), and dry runs that give the launch's verdict."""
import re

import pytest

from pretrain.config import validate
from pretrain.config.resolved import ResolvedRun
from pretrain.plan.planner import plan as make_plan
from pretrain.plan.verdict import verdict
from tests.helpers.launch_checks import accepted_by_training
from tests.helpers.repo import options as _options

BIG = ["model=llama3_70b", "parallel=dp8tp4pp2", "hardware=ascend910b_8x8"]


@pytest.mark.parametrize("override,key", [("model.hidden_size=-256", "model.hidden_size=-256 must be in [1, "),
                                          ("model.num_heads=0", "model.num_heads=0 must be in [1, "),
                                          ("model.global_batch_size=0", "model.global_batch_size=0 must be in [1, ")])
def test_out_of_range_on_the_cli_is_one_line_exit_2_nothing_frozen(cli, tmp_path, override, key):
    proc = cli(override, "dry_run=true", "run_dir=run")
    assert proc.returncode == 2 and key in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not any((tmp_path / "run" / name).exists() for name in ("config.yaml", "plan.json"))


@pytest.mark.slow   # moved out of the default suite's 5 minutes (still run by CI)
def test_a_plan_that_does_not_fit_is_refused_with_three_fitting_layouts(cli, compose_many, tmp_path):
    proc = cli(*BIG, "run_dir=run")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (memory,) = [ln for ln in proc.stderr.splitlines() if "GB per device" in ln]
    assert "largest part model states 66.1 GB" in memory and "plan.ignore_memory=true" in memory
    offered = re.findall(r"(parallel=\S+(?: parallel\.\S+)*) \(([\d.]+) GB", memory.split("these fit: ")[1])
    assert len(offered) == 3
    speeds = []
    for overrides, gb in offered:   # each suggestion, composed as written, passes and fits
        cfg = compose_many([*BIG, *overrides.split()])
        assert validate.problems(cfg) == []
        plan = make_plan(ResolvedRun.of(cfg))
        assert plan.fits and plan.peak_gb == pytest.approx(float(gb), abs=0.06)
        speeds.append(plan.tokens_per_s)
    assert speeds == sorted(speeds, reverse=True)
    assert not any((tmp_path / "run" / name).exists() for name in ("config.yaml", "plan.json"))  # refused first
    dry = cli(*BIG, "dry_run=true", "run_dir=dry")
    assert dry.returncode == 0 and memory in dry.stdout.replace("does not fit: ", "error: ")


@pytest.mark.slow   # moved out of the default suite's 5 minutes (still run by CI)
def test_ignore_memory_lets_a_trainable_layout_past_the_memory_rule(cli):
    args = ["model=llama3_8b", "parallel=dp8", "hardware=ascend910b_1x8", "parallel.zero_stage=0"]
    refused = cli(*args)
    assert refused.returncode == 2 and "GB per device" in refused.stderr
    forced = cli(*args, "plan.ignore_memory=true")
    # past every rule: what stops it now is the host, which has no Ascend devices
    assert forced.returncode == 2 and "no npu-smi" in forced.stderr and "GB per device" not in forced.stderr


def _planned(cfg):
    run = ResolvedRun.of(cfg)
    return run.with_plan(make_plan(run))


def _verdicts(compose_many, combos):
    rows = []
    for overrides in combos:
        cfg = compose_many([*overrides, "dry_run=true"])
        status = "invalid" if validate.problems(cfg) else verdict(_planned(cfg))[0]
        if status == "ok":
            accepted_by_training(cfg)
        rows.append((overrides, status))
    return rows


@pytest.mark.slow   # every option composed: ~3 s
def test_every_phase_and_data_option_row_ok_means_training_accepts_it(compose_many):
    """The phase and data options (the model x parallel x hardware product is in test_config.py)."""
    combos = [[f"phase={ph}", f"data={d}"] for ph in _options("phase") for d in _options("data")]
    rows = _verdicts(compose_many, combos)
    assert [s for o, s in rows if "data=sample" in o] == ["ok"] * len(_options("phase")), rows
    # data=files names the user's paths: a sound config ("ok"), whose files this host lacks (a launch
    # here refuses them, a dry run says so)
    assert {s for o, s in rows if "data=files" in o} == {"ok"}, rows
    assert validate.missing_files(compose_many(["data=files"]).data)
