"""`phase=general` then `phase=all` on the same run (issue 27), end to end on CPU with the real,
shrunken model. README calls phase=general alone "the base run's first stage"; phase=all on its run
dir was refused over every phase.* key with a "restore those keys" fix no command line could
follow. Now phase=all continues from general's final checkpoint and trains reasoning and anneal."""
import json

import pytest

from tests.helpers import cli
from tests.helpers.models import SMALL_MODEL

pytestmark = pytest.mark.slow

# 40 steps of 8 x 64 tokens (general 28, reasoning 8, anneal 4), as in test_branch_e2e.py
ARGS = [*SMALL_MODEL, "train.total_tokens=20480", "train.eval_every=0"]


def test_phase_all_continues_the_run_phase_general_started(tmp_path, data_cache):
    def run(*args):
        return cli.run(*args, *ARGS, cwd=tmp_path, cache=data_cache, timeout=900, check=True)

    run("phase=general")
    checkpoints = tmp_path / "runs" / "tiny-single-cpu" / "checkpoints"
    assert (checkpoints / "step_00000028-phase-general-final").is_dir()
    run()                                   # phase=all, the default
    finals = sorted(p.name for p in checkpoints.glob("step_*-final"))
    assert finals == ["step_00000028-phase-general-final", "step_00000036-phase-reasoning-final",
                      "step_00000040-phase-anneal-final"]
    lines = (tmp_path / "runs" / "tiny-single-cpu" / "events.jsonl").read_text().splitlines()
    resumed = [e for e in map(json.loads, lines) if e["kind"] == "resume"]
    assert resumed[-1]["path"].endswith("step_00000028-phase-general-final")
    summary = json.loads((tmp_path / "runs" / "tiny-single-cpu" / "summary.json").read_text())
    assert [p["phase"] for p in summary["phases"]] == ["reasoning", "anneal"]
