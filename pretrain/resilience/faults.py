"""TEST-ONLY fault injection, so the resilience tests can cause on demand what a month-long run
meets by chance. Never set it in a real run.

The faults come from the environment variable PRETRAIN_FAULTS, a JSON object with any of:
    {"nan_grads": [12, 13]}            global steps whose loss mask is NaN: the loss and every
                                       gradient of the step are NaN (as an overflow would make them)
    {"lr_mult": {"phase": "general", "data": [30, 32], "factor": 200}}
                                       the LR is multiplied while the phase reads those data indices
                                       (a destabilising batch: skipping it after a rollback cures it)
    {"hang_at": 5}                     global step 5 never finishes (the watchdog's business)
    {"kill_during_save": 6}            SIGKILL this process while checkpoint 6 is half-written
Unset (every real run), active() is None and each hook site costs one `is None` test.
"""
import json
import os
import signal
import time
from typing import Any, Dict, Optional

from pretrain.config.errors import PretrainConfigError

ENV = "PRETRAIN_FAULTS"
_KNOWN = ("nan_grads", "lr_mult", "hang_at", "kill_during_save")


class Faults:
    def __init__(self, spec: Dict[str, Any]):
        unknown = sorted(set(spec) - set(_KNOWN))
        if unknown:
            raise PretrainConfigError(f"{ENV}: unknown faults {unknown}; known: {list(_KNOWN)}")
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

    def batch(self, step: int, batch: Dict[str, Any]) -> Dict[str, Any]:
        if step not in self.nan_steps:
            return batch
        poisoned = dict(batch)
        poisoned["loss_mask"] = batch["loss_mask"] * float("nan")
        return poisoned

    def lr(self, phase: str, data_index: int, lr: float) -> float:
        if self.lr_data is None or (self.lr_phase and phase != self.lr_phase):
            return lr
        lo, hi = self.lr_data
        return lr * self.lr_factor if lo <= data_index <= hi else lr

    def during_save(self, step: int) -> None:
        """Called by the checkpoint writer after the weights file is written, before the manifest."""
        if self.kill_during_save is not None and step == int(self.kill_during_save):
            os.kill(os.getpid(), signal.SIGKILL)


_loaded = False
_active: Optional[Faults] = None


def active() -> Optional[Faults]:
    """The faults of PRETRAIN_FAULTS (read once per process), or None."""
    global _loaded, _active
    if not _loaded:
        raw = os.environ.get(ENV)
        if raw:
            try:
                spec = json.loads(raw)
            except json.JSONDecodeError as e:
                raise PretrainConfigError(
                    f"{ENV}={raw!r} is not JSON ({e}); it is for tests only: unset it") from None
            _active = Faults(spec)
        _loaded = True
    return _active
