"""Counting steps whose loss or gradients were not finite.

The skip itself happens inside the compiled train step (pretrain/train/step.py: ops.isfinite of the
global gradient norm, which any NaN or Inf makes non-finite, gates the optimizer update, and the
loss scaler backs off), so a NaN never reaches the weights. This guard only keeps count across
steps, and stops the run with a clear error when the skips do not end."""
from typing import Any, Dict

from pretrain.config.errors import PretrainRunError
from pretrain.config.resilience import nonfinite_problems, require


class NonFiniteGuard:
    def __init__(self, *, max_consecutive: int):
        require(nonfinite_problems(max_consecutive))
        self.max_consecutive = max_consecutive
        self.consecutive = 0
        self.total_skipped = 0

    def observe(self, step: int, finite: bool) -> bool:
        """Feed one step's finiteness; True when the step's update was skipped."""
        if finite:
            self.consecutive = 0
            return False
        self.consecutive += 1
        self.total_skipped += 1
        if self.consecutive > self.max_consecutive:
            raise PretrainRunError(
                f"{self.consecutive} steps in a row (up to step {step}) had a non-finite loss or gradients "
                f"(resilience.max_nonfinite_in_row={self.max_consecutive}); none reached the weights, but "
                f"the run is not recovering: resume from the last checkpoint with a lower LR, check the "
                f"data, or raise resilience.max_nonfinite_in_row")
        return True

    def state_dict(self) -> Dict[str, Any]:
        return {"consecutive": self.consecutive, "total_skipped": self.total_skipped}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.consecutive = int(state["consecutive"])
        self.total_skipped = int(state["total_skipped"])
