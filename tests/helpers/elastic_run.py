"""The shrunken 28-step msrun job the elastic and multi-node tests kill ranks and nodes of, and what
they read back from its run dir (events, losses, the ranks' exit status, the steps trained)."""
import json
import os
import signal
import subprocess
from pathlib import Path

from pretrain.train.metrics import read_metrics
from tests.helpers import cli
from tests.helpers.models import SMALL_MODEL

SMALL = [*SMALL_MODEL, "train.eval_every=0", "phase=general", "train.total_tokens=20480",   # 28 steps of 8 rows
         "train.save_every_steps=3", "train.keep_checkpoint_max=50"]
DP2 = ["parallel=dp2", "hardware=cpu_2proc"]
STEPS = 28


class Cli:
    """`python -m pretrain SMALL RUN_DIR ARGS` in cwd on one data cache (its own process group, output
    to cwd/out.N); finish waits for it and returns its output."""

    def __init__(self, cwd: Path, cache: Path):
        self.cwd, self.cache, self.n = cwd, cache, 0

    def start(self, run: str, *args):
        self.n += 1
        self.out = self.cwd / f"out.{self.n}"
        with open(self.out, "w") as out:
            return cli.start(*SMALL, f"run_dir={run}", *args, cwd=self.cwd, cache=self.cache,
                             env={"PRETRAIN_FAULTS": None}, stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True)

    def finish(self, proc, timeout=600):
        try:
            proc.wait(timeout=timeout)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        text = self.out.read_text(errors="replace")
        assert proc.returncode == 0, f"exit {proc.returncode}\n{text[-5000:]}"
        return text


def events(run: Path, kind: str):
    return [e for e in map(json.loads, (run / "events.jsonl").read_text().splitlines()) if e["kind"] == kind]


def losses(run: Path):
    return {r["step"]: r["loss"] for r in read_metrics(run / "metrics.jsonl") if r["kind"] == "train"}


def status(run: Path):
    return {int(p.stem.split("_")[1]): json.loads(p.read_text()) for p in (run / "logs").glob("rank_*.exit")}


def train_steps(run: Path):
    try:
        return [int(json.loads(line)["step"]) for line in (run / "metrics.jsonl").read_text().splitlines()
                if '"kind": "train"' in line]
    except (OSError, ValueError):
        return []
