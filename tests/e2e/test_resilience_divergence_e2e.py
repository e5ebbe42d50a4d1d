"""Issue 40: an early divergence, end to end. `python -m pretrain` on CPU with the real (shrunken) model
and the sample corpus (the Cli of tests/helpers/resilience_run.py), the LR multiplied on early batches through
the test-only fault hook (tests/sitehooks/pretrain_faults.py).

Left alone, LR x3000 on data 3..5 takes the loss from 8.32 (ln 4096) to 56 at step 5 and ~136 from
step 7 to the end; before this issue that run ended "done", exit 0, without a spike event: the spike
guard's window was still in its 20-step warm-up and then learned the diverged level as normal.
Everything here runs at the guard's defaults (10 in a row, warm-up 20)."""
import re

import pytest

from tests.helpers.resilience_run import STEPS, Cli

pytestmark = pytest.mark.slow

EARLY = {"phase": "general", "factor": 3000}


def test_an_early_spike_inside_the_warmup_rolls_back_skips_its_data_and_the_run_ends_healthy(tmp_path,
                                                                                             data_cache):
    cli = Cli(tmp_path, data_cache)
    cli.ok(cli.run(faults={"lr_mult": {**EARLY, "data": [3, 5]}}))

    spike, = cli.events("spike")
    # step 5's loss (56) is the first high one; ten in a row confirm it; the best level (~8.32) + 2 is the bar
    assert (spike["first_step"], spike["step"], spike["rule"]) == (5, 14, "best") and spike["loss"] > 20
    assert 10.2 < spike["threshold"] < 10.4
    rollback, = cli.events("rollback")
    assert rollback["to_step"] == 3    # the newest checkpoint from before step 4, whose update broke it
    skip, = [e for e in cli.events("skip") if e["what"] == "data"]
    assert skip["data"] == [3, 13] and skip["phase"] == "general"

    records = cli.train_records()
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    assert records[3]["data_index"] == 14          # step 4 reads past the skipped window
    assert max(r["loss"] for r in records) < 8.4   # no diverged loss left in the run's history
    assert records[-1]["loss"] < records[0]["loss"] - 0.3   # trains on: 8.33 -> 7.79 here, 28 general steps
    out, _ = cli.output()
    assert re.search(r"^loss spike at step 14: loss [\d.]+ > 10\.\d+ \(the phase's best [\d.]+ \+ "
                     r"resilience\.spike_best_margin=2\) since step 5; rolled back to step 3, skipping "
                     r"general's data 3-13$", out, re.M), out[-3000:]
    assert "phase general done: steps 1-28" in out


def test_an_early_divergence_that_comes_back_stops_past_the_rollback_budget_in_one_line(tmp_path, data_cache):
    cli = Cli(tmp_path, data_cache)
    # every batch from data 3 on destabilises: each rollback diverges again
    rc = cli.run("resilience.max_rollbacks=1", faults={"lr_mult": {**EARLY, "data": [3, 100000]}})
    out, err = cli.output()
    assert rc == 2, f"exit {rc}\n{out[-3000:]}\n{err[-3000:]}"   # a user error: never restarted
    line, = err.strip().splitlines()
    assert re.fullmatch(
        r"error: loss spike rollback limit at step 14: loss \d+(\.\d+)? > 10\.\d+ \(the phase's best 8\.3\d* "
        r"\+ resilience\.spike_best_margin=2\) since step 5; 2 rollbacks within 1000 steps \(at steps "
        r"\[14, 14\]; resilience\.max_rollbacks=1\); the run keeps diverging: lower train\.lr_peak, inspect "
        r"the data near those steps \(events\.jsonl\), or raise resilience\.max_rollbacks", line), line
    assert [(e["first_step"], e["step"]) for e in cli.events("spike")] == [(5, 14), (5, 14)]
    assert len(cli.events("rollback")) == 1
    error, = cli.events("error")
    assert error["reason"] == line.removeprefix("error: ")
    assert "phase general done" not in out and not list(cli.run_dir.glob("checkpoints/*final*"))
