"""Test-only faults, injected from outside the package by wrapping its functions, so the tests can
cause on demand what a month-long run meets by chance. Nothing of this is in the package.

sitecustomize.py (beside this file) installs them in every Python process started with this folder
on PYTHONPATH (tests/conftest.py puts it there for every process the suite starts: the CLI, msrun's
workers, spawned data workers, Ray's workers), from these variables:

PRETRAIN_FAULTS, a JSON object with any of:
    {"nan_grads": [12, 13]}            global steps whose loss mask is NaN: the loss and every
                                       gradient of the step are NaN (as an overflow would make them)
    {"lr_mult": {"phase": "general", "data": [30, 32], "factor": 200}}
                                       the LR is multiplied while the phase reads those data indices
                                       (a destabilising batch: skipping it after a rollback cures it)
    {"hang_at": 5}                     global step 5 never finishes (the watchdog's business)
    {"kill_during_save": 6}            SIGKILL this process while checkpoint 6 is half-written
PRETRAIN_DATA_FAIL="<stage>/<task glob>"   that data task raises before it commits;
    "<stage>/<task glob>:exit:<marker>"    the process dies there once (it creates <marker> first)
PRETRAIN_TEST_HOLD="<stage>/<task glob>"   that data task, inside its temp directory, drops a file in
    PRETRAIN_TEST_HOLD_DIR and waits until a signal ends it (an interrupt test's signal always
    arrives while work is held: no race, no fixed sleep)
"""
import fnmatch
import json
import os
import signal
import time
from pathlib import Path
from typing import Any, Callable, Dict

FAULTS, DATA_FAIL, HOLD = "PRETRAIN_FAULTS", "PRETRAIN_DATA_FAIL", "PRETRAIN_TEST_HOLD"
VARIABLES = (FAULTS, DATA_FAIL, HOLD)
_KNOWN = ("nan_grads", "lr_mult", "hang_at", "kill_during_save")


class Faults:
    def __init__(self, spec: Dict[str, Any]):
        unknown = sorted(set(spec) - set(_KNOWN))
        if unknown:
            raise ValueError(f"{FAULTS}: unknown faults {unknown}; known: {list(_KNOWN)}")
        self.nan_steps = {int(s) for s in spec.get("nan_grads", [])}
        lr = spec.get("lr_mult")
        self.lr_phase = lr and lr.get("phase")
        self.lr_data = (int(lr["data"][0]), int(lr["data"][1])) if lr else None
        self.lr_factor = float(lr["factor"]) if lr else 1.0
        self.hang_at = spec.get("hang_at")
        self.kill_during_save = spec.get("kill_during_save")

    def before_step(self, step: int) -> None:
        """`step` is about to run (1-based global step)."""
        if self.hang_at is not None and step == int(self.hang_at):
            while True:
                time.sleep(3600)

    def micro_batches(self, step: int, micro: list) -> list:
        if step not in self.nan_steps:
            return micro
        return [{**m, "loss_mask": m["loss_mask"] * float("nan")} for m in micro]

    def lr(self, phase: str, data_index: int, lr: float) -> float:
        if self.lr_data is None or (self.lr_phase and phase != self.lr_phase):
            return lr
        lo, hi = self.lr_data
        return lr * self.lr_factor if lo <= data_index <= hi else lr

    def after_weights(self, step: int) -> None:
        """The checkpoint writer wrote the weights of `step`, not yet its manifest."""
        if self.kill_during_save is not None and step == int(self.kill_during_save):
            os.kill(os.getpid(), signal.SIGKILL)


def install_faults(f: Faults) -> Callable[[], None]:
    """Wrap Trainer.train_step and CheckpointManager._publish with `f`; returns the undo."""
    from pretrain.resilience.checkpoint import CheckpointManager
    from pretrain.resilience.skips import data_index
    from pretrain.train.trainer import Trainer

    train_step, publish = Trainer.train_step, CheckpointManager._publish

    def faulty_train_step(self, plan):
        s = self.state
        number, index = s.global_step + 1, data_index(s.phase_step, s.data_skips.get(plan.name, ()))
        f.before_step(number)
        step = self.step.step
        self.step.step = lambda micro, lr: step(f.micro_batches(number, micro), f.lr(plan.name, index, lr))
        try:
            record = train_step(self, plan)
        finally:
            del self.step.step   # the class's method again
        record["lr"] = f.lr(plan.name, index, record["lr"])   # the LR the step applied
        return record

    def faulty_publish(self, step, tag, final, write_weights, *args, **kwargs):
        def write_then_fault(path):
            write_weights(path)
            f.after_weights(step)
        return publish(self, step, tag, final, write_then_fault, *args, **kwargs)

    Trainer.train_step, CheckpointManager._publish = faulty_train_step, faulty_publish

    def undo():
        Trainer.train_step, CheckpointManager._publish = train_step, publish
    return undo


def install_data_fail(spec: str) -> Callable[[], None]:
    """Wrap pretrain.data.stages._commit: a matching task fails before it commits; returns the undo."""
    from pretrain.data import stages

    pattern, _, rest = spec.partition(":")
    commit = stages._commit

    def failing_commit(out, stage, work):
        if not fnmatch.fnmatch(f"{stage}/{Path(out).name}", pattern):
            return commit(out, stage, work)

        def work_then_fail(tmp):
            record = work(tmp)
            if rest.startswith("exit:"):
                marker = Path(rest[5:])
                if not marker.exists():
                    marker.touch()
                    os._exit(1)             # a lost worker: no cleanup, no exception
                return record
            raise RuntimeError(f"injected failure in task {stage}/{Path(out).name} ({DATA_FAIL})")
        return commit(out, stage, work_then_fail)

    stages._commit = failing_commit

    def undo():
        stages._commit = commit
    return undo


def install_hold(pattern: str) -> Callable[[], None]:
    """Wrap pretrain.data.stages._commit: a matching task waits inside its temp dir; returns the undo."""
    from pretrain.data import stages

    commit = stages._commit

    def held_commit(out, stage, work):
        name = f"{stage}/{Path(out).name}"
        if not fnmatch.fnmatch(name, pattern):
            return commit(out, stage, work)

        def hold(tmp):
            marker = Path(os.environ["PRETRAIN_TEST_HOLD_DIR"]) / f"{os.getpid()}-{name.replace('/', '-')}"
            marker.touch()
            while True:                # until a signal ends this process (or raises in it)
                time.sleep(3600)
        return commit(out, stage, hold)

    stages._commit = held_commit

    def undo():
        stages._commit = commit
    return undo


def install_from_env() -> None:
    if os.environ.get(FAULTS):
        install_faults(Faults(json.loads(os.environ[FAULTS])))
    if os.environ.get(DATA_FAIL):
        install_data_fail(os.environ[DATA_FAIL])
    if os.environ.get(HOLD):
        install_hold(os.environ[HOLD])
