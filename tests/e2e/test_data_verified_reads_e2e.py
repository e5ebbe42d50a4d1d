"""Issue 40 item 2: every byte training reads is verified (pretrain/data/rowcache.py).

Before: the loader checked the row cache beside each shard (`<shard>.<sha16>.ids.npy`, ...) for its
size and shape only. 4 KB of random bytes in it crashed training at step ~57 with a 49-line
MindSpore Gather traceback; 4 KB set to a valid token id trained silently on the wrong tokens; a
damaged .db index went unchecked. Now the cache carries checksums written when it was built, a
mismatch rebuilds it from the verified shard (one warning line) and the batches are a clean run's,
and token ids beyond the vocabulary are one line naming the shard, the row and the id.
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pretrain.train.metrics import read_metrics
from tests.helpers.files_run import ARGS, corpus
from tests.helpers.verified_cache import build, overwrite


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build(tmp_path_factory.mktemp("verified"))


def train(cwd: Path, run: str, cache: str):
    """`python -m pretrain` (a shrunken phase=general run on cwd/data) into cwd/run: its train losses
    and the process."""
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env["PRETRAIN_CACHE"] = str(cwd / cache)
    proc = subprocess.run([sys.executable, "-m", "pretrain", *ARGS, f"run_dir={cwd / run}"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return [r["loss"] for r in read_metrics(cwd / run / "metrics.jsonl") if r["kind"] == "train"], proc


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory):
    """A clean run's losses, its corpus and data cache (cwd/clean-cache, never modified)."""
    cwd = tmp_path_factory.mktemp("train")
    corpus(cwd)
    return cwd, train(cwd, "clean", "clean-cache")[0]


@pytest.mark.slow
@pytest.mark.parametrize("fill", ["random", "token"])
def test_training_on_a_damaged_row_cache_trains_the_clean_runs_losses(clean_run, fill):
    """End to end: every row cache of a copy of the clean run's data cache damaged (random bytes:
    was a Gather traceback; one valid token id: was trained on silently); the run says so per file
    it reads, rebuilds them and trains exactly the clean run's losses."""
    cwd, clean = clean_run
    shutil.copytree(cwd / "clean-cache", cwd / fill)
    damaged = sorted((cwd / fill / "datasets").glob("*/train-*.ids.npy"))
    for f in damaged:                     # all of the data: whichever rows the few steps draw
        offset = np.load(f, mmap_mode="r").offset
        size = f.stat().st_size - offset
        overwrite(f, offset, np.random.default_rng(1).bytes(size) if fill == "random" else
                  np.full(size // 4, 7, "<i4").tobytes())
    losses, proc = train(cwd, f"run-{fill}", fill)
    assert losses == clean
    said = [ln for ln in proc.stderr.splitlines() if ln.startswith("warning:")]
    assert said and all(re.match(r"warning: .*ids\.npy: rows \d+-\d+ differ from their checksum", ln)
                        for ln in said), said           # one per file the phase's mix reads
    assert len({ln.split(": rows")[0] for ln in said}) == len(said)
