"""Every benchmark runs (issue 40): each `python -m pretrain.bench.<name>` as a user starts it, in its
tiniest form (the shrunken model, a few steps or repeats), to the end of its report. What is checked is
that the report is complete and consistent, never a timing: the figures are the benchmark's to measure
on an idle machine. (bench.data has its own tests: tests/unit/test_bench_data.py, tests/e2e/test_bench_data_e2e.py.)"""
import json
import re

import pytest

from tests.helpers import cli
from tests.helpers.models import SMALL_MODEL

NUMBER = r"[+-]?\d+(?:\.\d+)?"


@pytest.fixture
def bench(tmp_path, data_cache):
    """bench(module, *args) runs `python -m pretrain.bench.<name> ARGS` in tmp_path over the session's
    data cache, its scratch dirs (tempfile) under tmp_path/scratch; returns (stdout, scratch)."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()

    def run(module, *args, timeout=900):
        proc = cli.run(*args, cwd=tmp_path, module=module, cache=data_cache, env={"TMPDIR": str(scratch)},
                       timeout=timeout, check=True)
        assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
        return proc.stdout, scratch
    return run


@pytest.mark.slow   # 3-5 s each; with the slow suite to keep the default one within 5 minutes (it took 396 s in CI)
def test_resilience_bench_quick(bench):
    """Save stall, background write, verify and load of a shrunken model's checkpoint: seconds."""
    out, scratch = bench("pretrain.bench.resilience", "--repeats", "1", "--steps", "1", *SMALL_MODEL)
    assert re.search(r"model=tiny: 0\.60M params, checkpoint \d+\.\d MiB \(weights \+ Adam m/v \+ state\), "
                     r"\d+ cores, medians of 1", out), out
    for row in ("proxy training step", "sync:  save stall", "async: save stall (snapshot)",
                "until durable, idle", "verify (size + sha256)", "load, verified already",
                "load incl. verify"):
        assert re.search(rf"{re.escape(row)}\s+{NUMBER} ms", out), (row, out)
    assert list(scratch.iterdir()) == []   # its checkpoints were a TemporaryDirectory


@pytest.mark.slow   # ~12 s: two labelled corpora through the dedup stages and datasketch
def test_recall_bench(bench):
    """The near-dedup recall table, per kind and band of Jaccard, beside datasketch's, on a Chinese and an
    English corpus of 0.1 MB; its verdict line."""
    out, scratch = bench("pretrain.bench.recall", "--kinds", "zh-short,en-long", "--mb", "0.1", "--workers", "1")
    for kind in ("zh-short", "en-long"):
        bands = re.findall(rf"^{kind}\s+(>= 0\.9|0\.8-0\.9|0\.7-0\.8|0\.6-0\.7|< 0\.6)\s+\d+", out, re.M)
        assert bands == [">= 0.9", "0.8-0.9", "0.7-0.8", "0.6-0.7", "< 0.6"], out
        assert re.search(rf"^{kind}\s+unique documents dropped as near duplicates: \d+/\d+", out, re.M), out
    assert re.search(r"^goals: (all met|MISSED: .+)$", out, re.M), out
    assert list(scratch.iterdir()) == []   # its corpora were a TemporaryDirectory


@pytest.mark.slow   # ~1 min: five variants compile their own graphs
def test_train_bench(bench):
    out, scratch = bench("pretrain.bench.train", "rounds=1", "steps=1", *SMALL_MODEL)
    assert "model=tiny (598,336 params), 8 x 64 = 512 tokens/step" in out and "1 rounds x 1 steps" in out, out
    row = rf"^(bare_jit|bare_cell|step|-clip|loop)\s+\d+\.\d+\s+\d+\s+({NUMBER})%$"
    rows = dict(re.findall(row, out, re.M))
    assert list(rows) == ["bare_jit", "bare_cell", "step", "-clip", "loop"], out
    assert "+0.0" in (rows["bare_jit"], rows["bare_cell"]), rows   # the faster bare variant is the base
    assert re.search(rf"^our loop costs {NUMBER}% over the faster bare step \(goal <= \+5%\): (met|NOT met)$",
                     out, re.M), out
    # the loop variant logged its steps as `python -m pretrain` does: 2 rounds (warm-up + 1) of 1 step
    (metrics,) = scratch.glob("bench-train-*/metrics.jsonl")
    assert metrics.read_text().count('"kind": "train"') == 2


@pytest.mark.slow   # ~1 min: two graphs
def test_train_bench_document_mask(bench):
    out, _ = bench("pretrain.bench.train", "compare=document_mask", "rounds=1", "steps=1", *SMALL_MODEL)
    assert re.search(r"^mask on\s+\d+\.\d+ s/step\s+\d+ tokens/s$", out, re.M), out
    assert re.search(r"^mask off\s+\d+\.\d+ s/step\s+\d+ tokens/s$", out, re.M), out
    assert re.search(r"^step time mask on / off: \d+\.\d+$", out, re.M), out


@pytest.mark.slow   # two short trainings, one per engine
def test_engine_bench(bench):
    tiny = ["phase=general", *SMALL_MODEL, "train.eval_every=0", "train.total_tokens=3000"]   # bench.engine's SMALL, shorter
    out, _ = bench("pretrain.bench.engine", *tiny)
    found = re.search(r"pretrain (\d+) \| mindformers (\d+) \| mindformers/pretrain (\d+\.\d+)", out)
    assert found and int(found[1]) > 0 and int(found[2]) > 0, out


@pytest.mark.slow   # two short trainings of 7 steps
def test_dssn_bench(bench):
    out, scratch = bench("pretrain.bench.dssn", "model.num_layers=2", "train.total_tokens=5120")
    steps = re.findall(rf"^\s+(\d+)(?:\s+{NUMBER}){{4}}$", out, re.M)
    assert steps == ["1", "7"], out   # every 10th step and the last, of 0.7 x 5120 / 512 = 7
    for name in ("dssn", "pre-norm"):
        assert re.search(rf"^{name}: loss spikes .* max grad norm {NUMBER}$", out, re.M), out
    (png,) = scratch.glob("bench-dssn-*/dssn.png")
    assert f"curves: {png}" in out and png.stat().st_size > 10_000


@pytest.mark.slow   # one process and msrun's two ranks, then a kill -9
def test_launch_bench(bench):
    out, _ = bench("pretrain.bench.launch", "steps=3", *SMALL_MODEL)
    row = r"^(single|dp2)" + r"\s+(\S+)" * 5 + "$"
    rows = {m[0]: m[1:] for m in re.findall(row, out, re.M)}
    assert list(rows) == ["single", "dp2"], out
    assert rows["single"][1] == "-" and rows["dp2"][1] != "-", rows   # ranks_up is dp2's alone
    assert re.search(r"^dp2 / single: steady tokens/s x\d+\.\d+, measured x\d+\.\d+", out, re.M), out
    assert re.search(r"^kill -9 of rank 1 -> launch exited after \d+\.\d+ s$", out, re.M), out


@pytest.mark.slow   # sync and async runs of 40 steps, each killed -9 once and resumed
def test_resilience_bench_real(bench):
    out, _ = bench("pretrain.bench.resilience", "--real", "--kills", "1")
    assert re.search(r"^sync\s+\d+\.\dms", out, re.M) and re.search(r"^async\s+\d+\.\dms", out, re.M), out
    assert "resume after kill -9 (n=2)" in out, out
    lost = re.search(r"steps lost per crash: \[(\d+), (\d+)\]", out)
    # the default saves every 3 steps: a crash loses at most that many
    assert lost and all(0 <= int(n) <= 3 for n in lost.groups()), out


@pytest.mark.slow   # a calibration (the probe, two dp2 runs), then six configs of 3 steps: 4-10 min
def test_plan_bench(bench, tmp_path):
    # the shrunken model's width and depth; the bench sets each config's sequence length itself
    small = [o for o in SMALL_MODEL if not o.startswith(("model.seq_length", "model.max_position"))]
    out, _ = bench("pretrain.bench.plan", "steps=3", "out=bp", *small, "model.max_position_embeddings=128")
    row = rf"^(cpu|cpu_2proc)\s+(64|128)\s+(8|16)" + rf"\s+({NUMBER})" * 2 + r"\s+(\d+\.\d\d)\s+(yes|NO)"
    printed = re.findall(row, out, re.M)
    rows = printed[6:]
    assert printed[:6] == rows, out   # each config's row as it was measured, then the table's
    assert [(h, int(s), int(b)) for h, s, b, *_ in rows] == [
        ("cpu", 64, 8), ("cpu", 128, 8), ("cpu", 64, 16), ("cpu", 128, 16),
        ("cpu_2proc", 128, 8), ("cpu_2proc", 128, 16)], out
    for _, _, _, planned, measured, ratio, within in rows:
        assert float(planned) > 0 and float(measured) > 0
        assert float(ratio) == pytest.approx(float(measured) / float(planned), rel=0.02)   # of rounded figures
        assert (within == "yes") == (abs(float(ratio) - 1) <= 0.15)
    assert re.search(r"^\d of 6 within 15% \(calibration: measured on ", out, re.M), out
    results = json.loads((tmp_path / "bp" / "results.json").read_text())
    assert len(results) == 6 and all(r["planned_comm_s"] and r["measured_comm_s"] for r in results[4:])


@pytest.mark.slow   # a 2-node job of 150 steps killed once (node 1), then the same job uninterrupted: ~3 min
def test_chaos_bench(bench):
    out, scratch = bench("pretrain.bench.chaos", "--steps", "150", "--mtbf-s", "1", "--faults", "1",
                         "--kinds", "kill_node1")
    assert re.search(r"^chaos: 150 steps in \d+ s, exit 0, 1 faults \(MTBF 1 s\); uninterrupted: \d+ s", out,
                     re.M), out
    fault = re.search(rf"^kill_node1\s+(\d+)\s+({NUMBER})\s+({NUMBER})\s+(\d+)\s+({NUMBER})\s+({NUMBER})\s*$",
                      out, re.M)
    assert fault, out
    at, detect, first, lost, start, compile_ = fault.groups()
    # saves every 25 steps: a crash loses fewer; recovery is its start/load and its compile/first step
    assert 0 <= int(lost) < 25 and int(lost) <= int(at)
    assert 0 <= float(detect) < float(first) and float(start) + float(compile_) <= float(first) + 0.15
    good = re.search(r"^goodput \(steps x median step \d\.\d+ s / wall\): (\d+\.\d)%; the uninterrupted run's: "
                     r"(\d+\.\d)%", out, re.M)
    assert good and 0 < float(good[1]) < float(good[2]) <= 100, out   # a restart costs goodput
    assert "final weights equal the uninterrupted run's: True" in out, out
    assert list(scratch.iterdir()) == []   # its job dirs were a TemporaryDirectory
