"""Loss-spike detection, its own component with a JSON state saved in every checkpoint.

A spike is `consecutive` steps in a row whose loss is above a threshold computed from the last
`window` accepted losses: rule "ratio" uses ratio × mean (the seed's 10 steps at 2×), rule "sigma"
mean + sigma × std. Suspect losses never enter the window, so a spike cannot raise its own bar,
and a short run of outliers that ends before `consecutive` is dropped as noise.

How the training loop uses it on a spike (observe() returned True; pretrain/resilience/keeper.py):
    guard.record_rollback(step)                      # raises past max_rollbacks within the window
    start, end = guard.last_spike                    # first suspect step .. confirming step
    info = ckpt.latest(before_step=start - 1)        # from before the update of step start-1, the
                                                     # one that may have broken the model
    ckpt.discard_from(info.step + 1, "rollback")     # a crash must not resume into the spike
    ... load info, skip the data of steps start-1..end, then guard.rewind(info.step)
The guard's own state is NOT reloaded from the checkpoint on a rollback: its rollback history must
survive the rollback, and its window already holds only the pre-spike losses.
"""
import math
from collections import deque
from typing import Any, Deque, Dict, List, Optional, Tuple

from pretrain.config.errors import PretrainRunError
from pretrain.config.resilience import require, spike_problems


class SpikeGuard:
    def __init__(self, *, rule: str = "ratio", ratio: float = 2.0, consecutive: int = 10, window: int = 50,
                 sigma: float = 6.0, warmup_steps: int = 20, max_rollbacks: int = 3,
                 rollback_window_steps: int = 1000):
        require(spike_problems(rule=rule, ratio=ratio, consecutive=consecutive, window=window, sigma=sigma,
                               warmup_steps=warmup_steps, max_rollbacks=max_rollbacks,
                               rollback_window_steps=rollback_window_steps))
        self.rule, self.ratio, self.sigma = rule, ratio, sigma
        self.consecutive, self.warmup_steps = consecutive, warmup_steps
        self.max_rollbacks, self.rollback_window_steps = max_rollbacks, rollback_window_steps
        self._window: Deque[Tuple[int, float]] = deque(maxlen=window)
        self._suspects: List[Tuple[int, float]] = []
        self._accepted = 0
        self._rollbacks: List[int] = []
        self.last_spike: Optional[Tuple[int, int]] = None   # (first suspect step, confirming step)

    def threshold(self) -> float:
        losses = [loss for _, loss in self._window]
        mean = sum(losses) / len(losses)
        if self.rule == "ratio":
            return self.ratio * mean
        std = math.sqrt(sum((x - mean) ** 2 for x in losses) / len(losses))
        return mean + self.sigma * std

    def observe(self, step: int, loss: float) -> bool:
        """Feed one step's loss; True when a spike is confirmed (then see last_spike)."""
        loss = float(loss)
        if not math.isfinite(loss):
            return False            # the non-finite guard's business; a NaN would poison the mean forever
        if self._accepted < self.warmup_steps or len(self._window) < 2 or loss <= self.threshold():
            self._suspects = []
            self._window.append((step, loss))
            self._accepted += 1
            return False
        self._suspects.append((step, loss))
        if len(self._suspects) < self.consecutive:
            return False
        self.last_spike = (self._suspects[0][0], step)
        self._suspects = []
        return True

    def record_rollback(self, step: int) -> None:
        """Count a rollback done at `step`; raise when there are more than max_rollbacks within the
        last rollback_window_steps steps (the run diverges from the same state again and again)."""
        self._rollbacks = [s for s in self._rollbacks if s > step - self.rollback_window_steps]
        self._rollbacks.append(step)
        if len(self._rollbacks) > self.max_rollbacks:
            raise PretrainRunError(
                f"loss spike rollback limit: {len(self._rollbacks)} rollbacks within "
                f"{self.rollback_window_steps} steps (at steps {self._rollbacks}; "
                f"resilience.max_rollbacks={self.max_rollbacks}); the run keeps diverging: lower the LR, "
                f"inspect the data near those steps (events.jsonl), or raise resilience.max_rollbacks")

    def rewind(self, step: int) -> None:
        """After a rollback to checkpoint `step`: forget losses of later steps (they are re-run)."""
        kept = [(s, loss) for s, loss in self._window if s <= step]
        self._window.clear()
        self._window.extend(kept)
        self._suspects = []

    def reset(self) -> None:
        """Forget the reference losses (a new phase with a new data mix has a new loss level);
        the rollback history is kept."""
        self._window.clear()
        self._suspects = []
        self._accepted = 0

    def state_dict(self) -> Dict[str, Any]:
        return {"window": [list(x) for x in self._window], "suspects": [list(x) for x in self._suspects],
                "accepted": self._accepted, "rollbacks": list(self._rollbacks),
                "last_spike": list(self.last_spike) if self.last_spike else None}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self._window.clear()
        self._window.extend((int(s), float(loss)) for s, loss in state["window"])
        self._suspects = [(int(s), float(loss)) for s, loss in state["suspects"]]
        self._accepted = int(state["accepted"])
        self._rollbacks = [int(s) for s in state["rollbacks"]]
        self.last_spike = tuple(state["last_spike"]) if state["last_spike"] else None
