"""The `resilience:` block of the run config and the rules its values obey (pure Python).

The checkpoint cadence lives in train.* (save_every_steps, save_every_minutes, keep_checkpoint_max);
everything about surviving failures lives here. The guards built from the block
(pretrain/resilience/guards.py) and the launcher's restart budget check their settings with these
same functions, so a value is refused at compose time with the line the guard would raise."""
from dataclasses import dataclass
from typing import Any, Iterator, Optional

from pretrain.config.errors import PretrainConfigError

SPIKE_RULES = ("ratio", "sigma")


@dataclass
class ResilienceConfig:
    spike_rule: str = "ratio"            # ratio: loss > spike_ratio x mean; sigma: > mean + spike_sigma x std
    spike_ratio: float = 2.0             # the seed's rule: 10 steps at 2x the recent mean
    spike_consecutive: int = 10          # steps in a row above the bar before it counts as a spike
    spike_window: int = 50               # accepted losses the mean (and std) are taken over
    spike_sigma: float = 6.0
    spike_warmup_steps: int = 20         # no detection until this many losses were accepted
    max_rollbacks: int = 3               # more than this many rollbacks within ...
    rollback_window_steps: int = 1000    # ... this many steps stops the run with an error
    max_nonfinite_in_row: int = 30       # consecutive skipped (NaN/inf) steps before the run stops
    watchdog_timeout_s: float = 900.0    # no step finished for this long: dump stacks, exit 75
    first_step_timeout_s: float = 3600.0 # the first step includes graph compilation
    async_save: bool = False             # write checkpoints from a background thread
    # true: when no checkpoint in the run dir verifies, move them to checkpoints/quarantine/ and train
    # from step 0. false: that is an error, never a silent fresh start. A checkpoint that verifies is
    # always resumed from, so the key can stay in a command that a supervisor repeats.
    start_fresh: bool = False
    # true: a resume may continue on other data (a retrained or replaced tokenizer, another corpus,
    # another mixture, a checkpoint from a pretrain that did not record its data): a deliberate
    # change, logged as a `data_change` event. false: such a resume is refused in one line.
    allow_data_change: bool = False
    # A launch on one host (pretrain/launch/msrun.py) restarts a failed or hung job from its newest
    # verified checkpoint by itself, up to max_restarts times within restart_window seconds
    # (torchrun's --max-restarts); past that, with elastic, it leaves out the rank that keeps failing
    # and goes on with the largest data-parallel size the rest allow, down to hardware.min_devices.
    max_restarts: int = 3
    restart_window: float = 3600.0
    elastic: bool = False


def spike_problems(*, rule: str, ratio: float, consecutive: int, window: int, sigma: float,
                   warmup_steps: int, max_rollbacks: int, rollback_window_steps: int) -> Iterator[str]:
    checks = (
        (rule in SPIKE_RULES, "spike_rule", rule, f"one of {SPIKE_RULES}"),
        (ratio > 1.0, "spike_ratio", ratio, "> 1 (a loss above ratio x the recent mean)"),
        (consecutive >= 1, "spike_consecutive", consecutive, ">= 1"),
        (window >= 2, "spike_window", window, ">= 2 (a mean and a std need two losses)"),
        (sigma > 0, "spike_sigma", sigma, "> 0"),
        (warmup_steps >= 0, "spike_warmup_steps", warmup_steps, ">= 0"),
        (max_rollbacks >= 0, "max_rollbacks", max_rollbacks, ">= 0"),
        (rollback_window_steps >= 1, "rollback_window_steps", rollback_window_steps, ">= 1"),
    )
    for ok, key, value, rule_text in checks:
        if not ok:
            yield f"resilience.{key}={value!r}: must be {rule_text}"


def nonfinite_problems(max_consecutive: int) -> Iterator[str]:
    if max_consecutive < 1:
        yield f"resilience.max_nonfinite_in_row={max_consecutive}: must be >= 1"


def watchdog_problems(timeout_s: float, first_timeout_s: Optional[float]) -> Iterator[str]:
    if timeout_s <= 0 or (first_timeout_s is not None and first_timeout_s <= 0):
        yield (f"resilience.watchdog_timeout_s={timeout_s}, first_step_timeout_s={first_timeout_s}: "
               f"both must be > 0 seconds")


def restart_problems(max_restarts: int, restart_window: float) -> Iterator[str]:
    if int(max_restarts) < 0 or float(restart_window) <= 0:
        yield (f"resilience.max_restarts={max_restarts}, restart_window={restart_window}: need "
               f"max_restarts >= 0 (0: never restart) and a restart_window > 0 seconds")


def spike_settings(res: Any) -> dict:
    """The block's keys as SpikeGuard's keyword arguments."""
    return dict(rule=res.spike_rule, ratio=res.spike_ratio, consecutive=res.spike_consecutive,
                window=res.spike_window, sigma=res.spike_sigma, warmup_steps=res.spike_warmup_steps,
                max_rollbacks=res.max_rollbacks, rollback_window_steps=res.rollback_window_steps)


def require(found: Iterator[str]) -> None:
    """Raise the first of `found` (a guard refusing its settings)."""
    for line in found:
        raise PretrainConfigError(line)


def problems(res: Any) -> Iterator[str]:
    """Each bad setting of the block as one line (the first per guard), for the config checks."""
    for found in (spike_problems(**spike_settings(res)), nonfinite_problems(res.max_nonfinite_in_row),
                  watchdog_problems(res.watchdog_timeout_s, res.first_step_timeout_s),
                  restart_problems(res.max_restarts, res.restart_window)):
        yield from list(found)[:1]
