"""Loss-spike detection, its own component with a JSON state saved in every checkpoint.

A loss is suspect when it is above the lowest of the bars that hold at that step:
  - uniform: ln(vocab_size) + uniform_margin: worse than a uniform guess over the vocabulary.
    Holds from step 1 (an untrained model starts near ln V, a little above with a wide init).
  - best: the phase's best level + best_margin, the best level being the lowest mean of
    `consecutive` accepted losses in a row (a mean, so one easy batch does not set it). Holds from
    the phase's first accepted loss and never follows the loss up: it catches a slow drift upward
    that the window learns step by step.
  - window: from the last `window` accepted losses, rule "ratio" ratio x mean (the seed's 10 steps
    at 2x), rule "sigma" mean + sigma x std. Holds once `warmup_steps` losses were accepted.
A spike is `consecutive` suspect steps in a row; a shorter run of them is dropped as noise.
Suspect losses never enter the window or the best level, so a diverged loss cannot raise a bar,
during the warm-up included. The best level is the run's state like the window: checkpointed (a
resumed run keeps it) and started over with a new phase (a new data mix has a new loss level).

How the training loop uses it on a spike (observe() returned True; pretrain/resilience/keeper.py):
    guard.record_rollback(step)                      # raises past max_rollbacks within the window
    spike = guard.last_spike                         # first suspect step .. confirming step, loss, bar
    info = ckpt.latest(before_step=spike.first - 1)  # from before the update of step first-1, the
                                                     # one that may have broken the model
    ckpt.discard_from(info.step + 1, "rollback")     # a crash must not resume into the spike
    ... load info, skip the data of steps first-1..step, then guard.rewind(info.step)
The guard's own state is NOT reloaded from the checkpoint on a rollback: its rollback history must
survive the rollback, and its window and best level already hold only the pre-spike losses.
"""
import math
from collections import deque
from typing import Any, Deque, Dict, List, NamedTuple, Optional, Tuple

from pretrain.config.errors import PretrainRunError
from pretrain.config.resilience import require, spike_problems


class Spike(NamedTuple):
    first: int      # the first suspect step
    step: int       # the step that confirmed it
    loss: float     # that step's loss
    bar: float      # the bar it was above
    rule: str       # which bar: uniform | best | window


class SpikeGuard:
    def __init__(self, *, rule: str = "ratio", ratio: float = 2.0, consecutive: int = 10, window: int = 50,
                 sigma: float = 6.0, warmup_steps: int = 20, max_rollbacks: int = 3,
                 rollback_window_steps: int = 1000, uniform_margin: float = 3.0, best_margin: float = 2.0,
                 vocab_size: Optional[int] = None):
        require(spike_problems(rule=rule, ratio=ratio, consecutive=consecutive, window=window, sigma=sigma,
                               warmup_steps=warmup_steps, max_rollbacks=max_rollbacks,
                               rollback_window_steps=rollback_window_steps, uniform_margin=uniform_margin,
                               best_margin=best_margin))
        self.rule, self.ratio, self.sigma = rule, ratio, sigma
        self.consecutive, self.warmup_steps = consecutive, warmup_steps
        self.max_rollbacks, self.rollback_window_steps = max_rollbacks, rollback_window_steps
        self.uniform_margin, self.best_margin = uniform_margin, best_margin
        self.vocab_size = vocab_size            # None: no uniform bar (a guard without a model)
        self._window: Deque[Tuple[int, float]] = deque(maxlen=window)
        self._suspects: List[Tuple[int, float]] = []
        self._accepted = 0
        self.best: Optional[float] = None       # the phase's best level (lowest mean of `consecutive`)
        self._rollbacks: List[int] = []
        self.last_spike: Optional[Spike] = None

    def threshold(self) -> float:
        """The window's bar (rule ratio or sigma)."""
        losses = [loss for _, loss in self._window]
        mean = sum(losses) / len(losses)
        if self.rule == "ratio":
            return self.ratio * mean
        std = math.sqrt(sum((x - mean) ** 2 for x in losses) / len(losses))
        return mean + self.sigma * std

    def bar(self) -> Optional[Tuple[float, str]]:
        """The lowest bar that holds now, as (value, rule); None before any does."""
        bars = []
        if self.vocab_size:
            bars.append((math.log(self.vocab_size) + self.uniform_margin, "uniform"))
        if self.best is not None:
            bars.append((self.best + self.best_margin, "best"))
        if self._accepted >= self.warmup_steps and len(self._window) >= 2:
            bars.append((self.threshold(), "window"))
        return min(bars) if bars else None

    @property
    def suspect(self) -> bool:
        """The last losses are suspect, not yet confirmed as a spike nor cleared as noise."""
        return bool(self._suspects)

    def observe(self, step: int, loss: float) -> bool:
        """Feed one step's loss; True when a spike is confirmed (then see last_spike)."""
        loss = float(loss)
        if not math.isfinite(loss):
            return False            # the non-finite guard's business; a NaN would poison the mean forever
        bar = self.bar()
        if bar is None or loss <= bar[0]:
            self._accept(step, loss)
            return False
        self._suspects.append((step, loss))
        if len(self._suspects) < self.consecutive:
            return False
        self.last_spike = Spike(self._suspects[0][0], step, loss, *bar)
        self._suspects = []
        return True

    def _accept(self, step: int, loss: float) -> None:
        self._suspects = []
        self._window.append((step, loss))
        self._accepted += 1
        recent = [x for _, x in list(self._window)[-self.consecutive:]]
        level = sum(recent) / len(recent)
        self.best = level if self.best is None else min(self.best, level)

    def explain(self, spike: Spike) -> str:
        """`spike`'s loss against its bar, with the key that sets the bar."""
        if spike.rule == "uniform":
            why = (f"ln({self.vocab_size}) + resilience.spike_uniform_margin={self.uniform_margin:g}: "
                   f"worse than a uniform guess")
        elif spike.rule == "best":
            why = f"the phase's best {self.best:.4g} + resilience.spike_best_margin={self.best_margin:g}"
        elif self.rule == "ratio":
            why = f"resilience.spike_ratio={self.ratio:g} x the mean of the last {len(self._window)} losses"
        else:
            why = f"mean + resilience.spike_sigma={self.sigma:g} x std of the last {len(self._window)} losses"
        return f"loss {spike.loss:.4g} > {spike.bar:.4g} ({why}) since step {spike.first}"

    def record_rollback(self, step: int) -> None:
        """Count a rollback done at `step`; raise when there are more than max_rollbacks within the
        last rollback_window_steps steps (the run diverges from the same state again and again)."""
        self._rollbacks = [s for s in self._rollbacks if s > step - self.rollback_window_steps]
        self._rollbacks.append(step)
        if len(self._rollbacks) > self.max_rollbacks:
            spike = f": {self.explain(self.last_spike)}" if self.last_spike else ""
            raise PretrainRunError(
                f"loss spike rollback limit at step {step}{spike}; {len(self._rollbacks)} rollbacks within "
                f"{self.rollback_window_steps} steps (at steps {self._rollbacks}; "
                f"resilience.max_rollbacks={self.max_rollbacks}); the run keeps diverging: lower "
                f"train.lr_peak, inspect the data near those steps (events.jsonl), or raise "
                f"resilience.max_rollbacks")

    def rewind(self, step: int) -> None:
        """After a rollback to checkpoint `step`: forget losses of later steps (they are re-run).
        The best level stays: those losses were accepted, before the spike."""
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
        self.best = None

    def state_dict(self) -> Dict[str, Any]:
        return {"window": [list(x) for x in self._window], "suspects": [list(x) for x in self._suspects],
                "accepted": self._accepted, "best": self.best, "rollbacks": list(self._rollbacks),
                "last_spike": list(self.last_spike) if self.last_spike else None}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self._window.clear()
        self._window.extend((int(s), float(loss)) for s, loss in state["window"])
        self._suspects = [(int(s), float(loss)) for s, loss in state["suspects"]]
        self._accepted = int(state["accepted"])
        # a checkpoint from before the best level: it starts over from the next accepted losses
        self.best = state.get("best")
        self._rollbacks = [int(s) for s in state["rollbacks"]]
        last = state["last_spike"]
        self.last_spike = Spike(*last) if last and len(last) == len(Spike._fields) else None

