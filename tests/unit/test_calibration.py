"""The plan's step time and memory from measurements: the calibration store, its fit, the plan that uses
it, and the planned / measured table every run prints."""
import json
from dataclasses import replace

import pytest

from pretrain.config.resolved import ResolvedRun
from pretrain.plan import calibration
from pretrain.plan.calibration import Point, fit
from pretrain.plan.planner import device_flops_per_step, format_plan, memory_split_gb, plan
from pretrain.train.summary import format_versus, note_measured


def point(flops, step_s, shape=None, rss=4.5, planned=0.5):
    return Point(shape=shape or f"s{flops}", flops=flops, step_s=step_s, rss_gb=rss, planned_gb=planned,
                 host="h", date="2026-12-03")


def test_two_sizes_separate_the_fixed_cost_from_the_rate():
    cal = fit("cpu", [point(1e9, 0.3), point(2e9, 0.5), point(4e9, 0.9)])   # 0.1 s + 1e9 FLOP / 0.2 s
    assert cal.overhead_s == pytest.approx(0.1) and cal.flops_per_s == pytest.approx(5e9)
    assert cal.step_s(3e9) == pytest.approx(0.7)
    assert cal.fixed_gb == pytest.approx(4.0) and cal.points == 3


def test_one_size_or_a_negative_fixed_cost_keeps_the_rate_alone():
    assert fit("cpu", [point(2e9, 0.5)]).overhead_s == 0.0
    assert fit("cpu", [point(2e9, 0.5)]).flops_per_s == pytest.approx(4e9)
    noisy = fit("cpu", [point(1e9, 0.1), point(2e9, 0.5)])   # the line would cross zero below 0.75e9
    assert noisy.overhead_s == 0.0 and noisy.step_s(3e9) == pytest.approx(3e9 * 0.6 / 3e9)
    assert fit("cpu", []) is None


def test_points_at_two_sequence_lengths_fit_how_the_rate_grows_with_the_sequence():
    # 0.05 s a step, plus FLOPs at 1e10/s x (seq / 128) ** 0.5: shorter rows compute slower per FLOP
    def timed(flops, seq, shape):
        return Point(shape=shape, flops=flops, step_s=0.05 + flops / (1e10 * (seq / 128) ** 0.5), rss_gb=1.0,
                     planned_gb=0.5, host="h", date="2026-12-03", seq=seq)
    pts = [timed(1e9, 128, "a|s128-mb8"), timed(2e9, 128, "a|s128-mb16"), timed(0.45e9, 64, "a|s64-mb8")]
    cal = fit("cpu", pts)
    assert cal.overhead_s == pytest.approx(0.05) and cal.seq_exponent == pytest.approx(0.5)
    assert cal.ref_seq == 128 and cal.flops_per_s == pytest.approx(1e10)
    assert cal.step_s(0.9e9, 64) == pytest.approx(0.05 + 0.9e9 / (1e10 * 0.5 ** 0.5))
    assert cal.step_s(1e9) == cal.step_s(1e9, 128)   # no length given: the rate at the reference
    # FLOPs alone (one length) would plan the half-length step too fast by the rate's factor
    one_length = fit("cpu", pts[:2])
    assert one_length.seq_exponent == 0.0 and one_length.step_s(0.9e9, 64) < 0.9 * cal.step_s(0.9e9, 64)
    # a point recorded before points kept their length: its shape key says it
    old = Point(shape="a|s64-mb8-gb8-dp1-rcnone", flops=1.0, step_s=1.0, rss_gb=1.0, planned_gb=0.5, host="h",
                date="2026-12-03")
    assert calibration.seq_of(old) == 64 and calibration.seq_of(point(1e9, 0.3)) == 0


def test_points_of_two_activation_sizes_fit_the_runtime_and_the_graphs_multiple(compose_many):
    # what a process held: 0.03 GB of model states, a 1.0 GB runtime, 12x each graph's activations
    held = [Point(shape=f"s{x}", flops=1e9 * (1 + k), step_s=0.5 + 0.1 * k, rss_gb=0.03 + 1.0 + 12 * x,
                  planned_gb=0.03 + x, host="h", date="2026-12-03", activations_gb=x)
            for k, x in enumerate([0.03, 0.06, 0.09])]
    cal = fit("cpu", held)
    assert cal.fixed_gb == pytest.approx(1.0) and cal.activation_scale == pytest.approx(12.0)
    # a run that accumulates compiles two graphs, each keeping its own multiple
    one, two = compose_many(["train.global_batch_size=8"]), compose_many(["train.global_batch_size=16"])
    for cfg, graphs in ((one, 1), (two, 2)):
        planned = plan(ResolvedRun.of(cfg), cal)
        acts = planned.peak.activations_gb + planned.peak.logits_gb
        assert planned.process_gb == pytest.approx(planned.peak_gb - acts + 1.0 + 12 * acts * graphs)
        states, grows = memory_split_gb(planned)
        assert (states, grows) == pytest.approx((planned.peak_gb - acts, acts * graphs))
    # points recorded before the split (no activations) leave the old rule: the median beyond the plan
    assert fit("cpu", [point(1e9, 0.3), *held[:1]]).activation_scale == 1.0


def test_a_later_point_of_the_same_shape_replaces_the_older(tmp_path):
    calibration.record(str(tmp_path), "cpu", point(1e9, 0.3, shape="a"))
    calibration.record(str(tmp_path), "cpu", point(2e9, 0.5, shape="b"))
    calibration.record(str(tmp_path), "cpu", point(1e9, 0.4, shape="a"))
    assert [(p.shape, p.step_s) for p in calibration.read_points(str(tmp_path), "cpu")] == [("b", 0.5), ("a", 0.4)]
    (tmp_path / "calibration" / "cpu.json").write_text("not json")
    assert calibration.read_points(str(tmp_path), "cpu") == []   # unreadable: the plan assumes again


def test_each_engine_plans_from_its_own_points(compose_many, tmp_path):
    ours = compose_many([f"data.cache_dir={tmp_path}"])
    theirs = compose_many([f"data.cache_dir={tmp_path}", "train.engine=mindformers"])
    assert calibration.shape_key(theirs) == calibration.shape_key(ours) + "-mindformers"
    calibration.record(str(tmp_path), "cpu", point(1e9, 0.5, shape=calibration.shape_key(ours)))
    assert calibration.load(theirs) is None   # MindFormers' graph is not ours: none of its own yet
    calibration.record(str(tmp_path), "cpu", point(1e9, 2.0, shape=calibration.shape_key(theirs)))
    assert calibration.load(ours).step_s(1e9) == pytest.approx(0.5)
    assert calibration.load(theirs).step_s(1e9) == pytest.approx(2.0)


def test_a_calibrated_plan_says_so_and_uses_the_fit(compose_many):
    cfg = compose_many([])
    flops = device_flops_per_step(ResolvedRun.of(cfg))
    cal = fit("cpu", [point(flops, 0.8, planned=plan(ResolvedRun.of(cfg)).peak_gb, rss=4.2)])
    assumed, measured = plan(ResolvedRun.of(cfg)), plan(ResolvedRun.of(cfg), cal)
    assert measured.step_s == pytest.approx(0.8) and measured.tokens_per_s == pytest.approx(
        assumed.tokens_per_step / 0.8)
    assert measured.process_gb == pytest.approx(4.2)
    assert "measured on h, 2026-12-03" in format_plan(measured) and "assumed" not in format_plan(measured)
    assert "(assumed: train.efficiency=0.45" in format_plan(assumed)
    ascend = compose_many(["model=llama3_8b", "hardware=ascend910b_1x8", "parallel=dp8"])
    assert plan(ResolvedRun.of(ascend), cal).framework_gb == 0.0   # host memory says nothing of a device's


@pytest.mark.parametrize("accumulate", [False, True])
def test_an_uncalibrated_cpu_plan_assumes_the_hardwares_runtime_and_graph_multiple(compose_many, accumulate):
    """Until a calibration measures it, a CPU process is planned as hardware.runtime_gb plus, per training
    graph it compiles (two under gradient accumulation), graph_activation_multiple x the activations."""
    extra = ["parallel.micro_batch_size=4"] if accumulate else []
    got = plan(ResolvedRun.of(compose_many([*extra, "hardware.runtime_gb=0.5",
                                            "hardware.graph_activation_multiple=10"])))
    acts = got.peak.activations_gb + got.peak.logits_gb
    graphs = 2 if accumulate else 1
    assert got.layout.grad_accum == graphs and acts > 0
    assert got.framework_gb == pytest.approx(0.5 + (10 * graphs - 1) * acts)
    assert got.process_gb == pytest.approx(got.peak_gb + got.framework_gb)
    assert "assumed: hardware.runtime_gb + hardware.graph_activation_multiple" in format_plan(got)
    none = plan(ResolvedRun.of(compose_many(["hardware.runtime_gb=0", "hardware.graph_activation_multiple=1"])))
    assert none.framework_gb == 0.0 and "process:" not in format_plan(none)


def test_one_point_measures_the_fixed_part_and_keeps_the_assumed_multiple_of_activations():
    """One run's point (the default job's: 4.28 GB held, 0.34 planned of which 0.26 activations) gives the
    fixed part beyond 13x its activations, so a model with a tenth of the activations is planned at its own
    size, not at the default job's 4.28 GB."""
    default_job = replace(point(1e9, 0.5, rss=4.28, planned=0.34), activations_gb=0.26)
    cal = fit("cpu", [default_job], activation_scale=13)
    assert cal.activation_scale == 13 and cal.fixed_gb == pytest.approx(4.28 - 0.34 - 12 * 0.26)
    assert 0.08 + cal.beyond_plan_gb(0.26, 1) + 0.26 == pytest.approx(4.28)   # its own point, as measured
    small = 0.01 + 0.026 + cal.beyond_plan_gb(0.026, 1)
    assert small == pytest.approx(cal.fixed_gb + 0.01 + 13 * 0.026) and small < 1.3
    assert fit("cpu", [default_job]).fixed_gb == pytest.approx(4.28 - 0.34)   # no multiple assumed: all fixed


def test_the_summary_sets_measured_beside_planned_and_plan_json_keeps_it(tmp_path):
    planned = {"step_s": 0.5, "tokens_per_s": 4000.0, "memory_gb": 4.0, "save_s": 0.1, "comm_s": 0.0,
               "source": "measured on h, 2026-12-03 (1 point)"}
    measured = {"step_s": 0.6, "tokens_per_s": 3333.0, "memory_gb": 4.4, "save_s": None, "steps_timed": 9}
    lines = format_versus([{"phase": "general", "planned": planned, "measured": measured}])
    assert lines[0] == "planned / measured (measured on h, 2026-12-03 (1 point)):"
    assert "0.500 / 0.600 (+20%)" in lines[2] and "4.00 / 4.40 (+10%)" in lines[2] and lines[2].endswith("-")
    busy = {**measured, "step_s": 1.5, "host_load": {"load": 5.2, "cores": 2}}
    assert format_versus([{"phase": "general", "planned": planned, "measured": busy}])[2].endswith(
        "  (host busy: load 5.2 on 2 cores)")   # a time off by more than 30% says why on its line
    idle = {**busy, "host_load": {"load": 1.1, "cores": 2}}
    assert "host busy" not in format_versus([{"phase": "general", "planned": planned, "measured": idle}])[2]
    assert "host busy" not in format_versus([{"phase": "general", "planned": planned,
                                              "measured": {**measured, "host_load": busy["host_load"]}}])[2]
    (tmp_path / "plan.json").write_text(json.dumps({"step_s": 0.5}))
    note_measured(tmp_path / "plan.json", [{"phase": "general", "measured": measured}])
    assert json.loads((tmp_path / "plan.json").read_text()) == {"step_s": 0.5, "measured": {"general": measured}}


def test_a_plan_takes_its_own_architectures_points_first(tmp_path, compose_many):
    cfg = compose_many([f"data.cache_dir={tmp_path}"])
    other = point(1e9, 5.0, shape="other-arch|s64")
    calibration.record(str(tmp_path), "cpu", other)
    assert calibration.load(cfg).flops_per_s == pytest.approx(2e8)   # only another's: better than assuming
    own = point(1e9, 0.5, shape=f"{calibration.arch_key(cfg)}|s64")
    calibration.record(str(tmp_path), "cpu", own)
    assert calibration.load(cfg).flops_per_s == pytest.approx(2e9) and calibration.load(cfg).points == 1


def test_points_at_one_length_take_the_sequence_scaling_from_the_same_hosts_probe(tmp_path, compose_many):
    # the probe (hardware cpu) timed two lengths: rate x (seq / 64) ** 0.5; cpu_2proc's runs, one length
    cfg = compose_many([f"data.cache_dir={tmp_path}", "hardware=cpu_2proc", "parallel=dp2"])
    arch = calibration.arch_key(cfg)

    def at(seq, flops, step_s, host="h"):
        return Point(shape=f"{arch}|s{seq}-mb{flops:g}", flops=flops, step_s=step_s, rss_gb=1.0,
                     planned_gb=0.5, host=host, date="2026-12-03", seq=seq)
    for p in (at(64, 1e9, 0.1), at(64, 2e9, 0.2), at(32, 1e9, 0.1 * 2 ** 0.5)):
        calibration.record(str(tmp_path), "cpu", p)
    calibration.record(str(tmp_path), "cpu_2proc", at(128, 1e9, 0.25))
    calibration.record(str(tmp_path), "cpu_2proc", at(128, 2e9, 0.45))   # 0.05 s + 1e9 FLOP / 0.2 s
    cal = calibration.load(cfg)
    assert cal.seq_exponent == pytest.approx(0.5) and cal.ref_seq == 128 and cal.exponent_from == "cpu"
    assert cal.step_s(2e9, 128) == pytest.approx(0.45)   # its own points as measured
    assert cal.step_s(2e9, 256) == pytest.approx(0.05 + 0.4 / 2 ** 0.5)
    assert "sequence scaling from cpu" in cal.source
    # another host's kernels say nothing of this one's: FLOPs alone then
    (tmp_path / "calibration" / "cpu.json").unlink()
    for p in (at(64, 1e9, 0.1, "other"), at(32, 1e9, 0.2, "other")):
        calibration.record(str(tmp_path), "cpu", p)
    assert calibration.load(cfg).seq_exponent == 0.0 and "scaling" not in calibration.load(cfg).source


def test_a_phase_times_its_steady_steps_after_the_compile_and_the_warm_up():
    from pretrain.train.measure import WARMUP_STEPS, PhaseMeter

    def timed(times, first_steps_run=1):
        meter = PhaseMeter(saves_before=0)
        for k, t in enumerate(times):
            meter.step({"step_time_s": t}, first_steps_run + k)
        return meter.result(tokens_per_step=100, save_times=[])

    steady = timed([6.0] + [0.12] * WARMUP_STEPS + [0.09] * 10)
    assert steady["step_s"] == pytest.approx(0.09) and steady["steps_timed"] == 10
    short = timed([6.0, 0.12, 0.12, 0.09])   # too few to leave the warm-up out: all after the compile
    assert short["step_s"] == pytest.approx(0.12) and short["steps_timed"] == 3
    later = timed([0.09] * 8, first_steps_run=40)   # a later phase of one process: no compile, no warm-up
    assert later["step_s"] == pytest.approx(0.09) and later["steps_timed"] == 8


def test_a_step_of_several_micro_batches_pays_the_fixed_cost_for_each():
    # 0.05 s per micro-batch plus 1e9 FLOP / 0.2 s: the run of two micro-batches is fitted per micro-batch
    one = Point(shape="a|mb8", flops=1e9, step_s=0.25, rss_gb=1.0, planned_gb=0.5, host="h", date="d")
    two = Point(shape="a|mb8-ga2", flops=4e9, step_s=0.9, rss_gb=1.0, planned_gb=0.5, host="h", date="d",
                micro_batches=2)
    cal = fit("cpu", [one, two])
    assert cal.overhead_s == pytest.approx(0.05) and cal.flops_per_s == pytest.approx(5e9)
    assert cal.step_s(2e9, micro_batches=2) == pytest.approx(0.5)    # two launches of 1e9 FLOPs each
    assert cal.step_s(2e9) == pytest.approx(0.45)                    # one of 2e9
