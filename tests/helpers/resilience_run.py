"""The shrunken three-phase run (40 steps, a save every 3) the resilience tests crash, signal and
resume, and the `python -m pretrain` that starts it (its own process group, output to files) with
what they read back from its run dir."""
import json
import os
import signal
import time
from pathlib import Path

from pretrain.resilience.events import read_events
from tests.helpers import cli
from tests.helpers.models import SMALL_MODEL

RUN = Path("runs") / "tiny-single-cpu"
SAVE_EVERY = 3
# 40 steps of 8 x 64 tokens (general 28, reasoning 8, anneal 4), ~0.1 s each: a process lives
# ~15-25 s, most of it start-up and graph compilation.
ARGS = [
    *SMALL_MODEL,
    "train.total_tokens=20480",
    f"train.save_every_steps={SAVE_EVERY}",
    "train.eval_every=0",
]
STEPS = 40
FINAL = "step_00000040-phase-anneal-final"


class Cli:
    """`python -m pretrain ARGS` in `cwd` (its own process group, output to files)."""

    def __init__(self, cwd, cache):
        self.cwd, self.cache = Path(cwd), cache
        self.run_dir = self.cwd / RUN
        self.n = 0

    def start(self, *extra, faults=None, preexec_fn=None):
        env = {"PRETRAIN_FAULTS": None if faults is None else json.dumps(faults)}
        self.n += 1
        self.out, self.err = self.cwd / f"stdout.{self.n}", self.cwd / f"stderr.{self.n}"
        with open(self.out, "w") as out, open(self.err, "w") as err:
            return cli.start(*ARGS, *extra, cwd=self.cwd, cache=self.cache, env=env, stdout=out, stderr=err,
                             start_new_session=True, preexec_fn=preexec_fn)

    def run(self, *extra, timeout=300, **kw):
        proc = self.start(*extra, **kw)
        try:
            proc.wait(timeout=timeout)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        return proc.returncode

    def output(self):
        return self.out.read_text(errors="replace"), self.err.read_text(errors="replace")

    def ok(self, rc):
        out, err = self.output()
        assert rc == 0, f"exit {rc}\n{out[-3000:]}\n{err[-3000:]}"

    def events(self, kind=None):
        path = self.run_dir / "events.jsonl"
        events = read_events(path) if path.exists() else []
        return [e for e in events if kind is None or e["kind"] == kind]

    def logged_steps(self):
        """Steps of the complete train records in metrics.jsonl."""
        try:
            lines = (self.run_dir / "metrics.jsonl").read_text().split("\n")[:-1]
        except FileNotFoundError:
            return []
        return [json.loads(line)["step"] for line in lines if '"train"' in line]

    def signal_at(self, proc, step, sig, starts=1):
        """Send `sig` to the run's process group once it logged `step`, and `starts` start events
        (this process's: logged once a resume has cut metrics.jsonl back to its checkpoint)."""
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"the run ended (exit {proc.returncode}) before step {step}"
            steps = self.logged_steps()
            if len(self.events("start")) >= starts and steps and steps[-1] >= step:
                os.killpg(proc.pid, sig)
                return proc.wait(timeout=120)
            time.sleep(0.02)
        raise AssertionError(f"step {step} not reached")

    def train_records(self):
        lines = (self.run_dir / "metrics.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines if '"train"' in line]

    def checkpoint(self, name):
        return self.run_dir / "checkpoints" / name
