"""The verdict `python -m pretrain.bench.plan` prints: a config is within the tolerance by its measured /
planned step ratio, judged per round and, over several rounds, by the median of its ratios (the timing
itself is the benchmark's to measure on an idle machine, never a test's)."""
from pretrain.plan import tolerance


def row(measured, planned=0.2, hardware="cpu", seq=64, batch=8):
    return {"hardware": hardware, "seq": seq, "batch": batch, "planned_step_s": planned,
            "measured_step_s": measured, "planned_gb": 1.0, "measured_gb": 1.1, "wall_s": 20.0,
            "source": "measured on h, d (3 points)", "planned_comm_s": 0.0, "measured_comm_s": None}


def test_a_round_is_judged_per_config_at_the_tolerance():
    assert tolerance.TOLERANCE == 0.15
    table = tolerance.table([row(0.2 * 1.149), row(0.2 * 1.151, seq=128), row(0.2 * 0.851, batch=16)])
    lines = table.splitlines()
    assert [line.split()[6] for line in lines[1:4]] == ["yes", "NO", "yes"]
    assert lines[-1].startswith("2 of 3 within 15%")


def test_several_rounds_are_judged_by_the_median_ratio_of_each_config():
    rounds = [[row(0.2 * 0.7), row(0.3, planned=0.2)],
              [row(0.2 * 1.05), row(0.2, planned=0.2)],
              [row(0.2 * 1.5), row(0.31, planned=0.2)]]
    lines = tolerance.medians(rounds).splitlines()
    assert lines[1].split()[-2:] == ["1.05", "yes"]   # 0.70, 1.05, 1.50: one bad round either way
    assert lines[2].split()[-2:] == ["1.50", "NO"]    # 1.50, 1.00, 1.55
    assert lines[-1] == "1 of 2 within 15% by the median of 3 rounds"
