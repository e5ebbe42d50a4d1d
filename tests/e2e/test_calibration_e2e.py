"""plan.calibrate=true and a real run: the probe's points calibrate the plan it prints, the run sets
what it measured beside that plan (summary.json, the printed table, plan.json) and records its own
point. Whether the planned step is within 15% is the benchmark's to measure
(`python -m pretrain.bench.plan`): a test's verdict must not depend on the machine's load."""
import json

import pytest

from pretrain.train.measure import WARMUP_STEPS
from tests.helpers.models import SMALL_MODEL

pytestmark = pytest.mark.slow


def test_a_probe_calibrates_the_plan_and_the_run_measures_beside_it(cli, tmp_path):
    common = [*SMALL_MODEL, "phase=general", "train.total_tokens=18432", "train.eval_every=0"]
    probe = cli(*common, "plan.calibrate=true", "dry_run=true", check=True)
    assert "step time measured on" in probe.stdout and "process:" in probe.stdout, probe.stdout[-2000:]
    assert not (tmp_path / "output").exists()   # MindFormers' logs of the probe stay beside the calibration
    points = json.loads((tmp_path / "cache" / "calibration" / "cpu.json").read_text())
    assert [p["shape"].split("-probe-")[-1] for p in points] == ["rows", "rows2", "half-seq"]
    assert points[1]["flops"] == 2 * points[0]["flops"] and all(p["step_s"] > 0 for p in points)
    assert [p["seq"] for p in points] == [64, 64, 32]
    assert points[2]["flops"] < points[0]["flops"] / 2   # half the rows' tokens, and shorter attention

    run = cli(*common, check=True)
    assert "planned / measured (measured on" in run.stdout, run.stdout[-2000:]
    run_dir = tmp_path / "runs" / "tiny-single-cpu"
    summary = json.loads((run_dir / "summary.json").read_text())
    phase, = summary["phases"]
    assert phase["planned"]["source"].startswith("measured on")
    # all but the compiling first step and the warm-up after it
    assert phase["measured"]["steps_timed"] == phase["steps"] - 1 - WARMUP_STEPS
    assert phase["measured"]["step_s"] > 0 and phase["measured"]["memory_gb"] > 0.5   # MindSpore's runtime
    assert "comm_s" not in phase["measured"]   # one process: no all-reduce to time
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["calibration"] == phase["planned"]["source"] and plan["measured"]["general"] == phase["measured"]
    assert plan["step_s"] == pytest.approx(phase["planned"]["step_s"])
    points = json.loads((tmp_path / "cache" / "calibration" / "cpu.json").read_text())
    assert len(points) == 4 and points[-1]["step_s"] == pytest.approx(summary["measured"]["step_s"])
