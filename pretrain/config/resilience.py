"""The `resilience:` block of the run config and the rules its values obey (pure Python).

The checkpoint cadence lives in train.* (save_every_steps, save_every_minutes, keep_checkpoint_max);
everything about surviving failures lives here. The guards built from the block
(pretrain/resilience/guards.py) and the launcher's restart budget check their settings with these
same functions, so a value is refused at compose time with the line the guard would raise."""
import dataclasses
from dataclasses import dataclass
from typing import Any, Iterator, Optional

from pretrain.config.errors import PretrainConfigError
from pretrain.config.ranges import RANGE, between, range_problem

SPIKE_RULES = ("ratio", "sigma")
_COUNT = 10**9          # no count of steps, rollbacks or restarts needs more
_SECONDS = 1e7          # ~4 months: no timeout or window needs more


@dataclass
class ResilienceConfig:
    spike_rule: str = "ratio"            # ratio: loss > spike_ratio x mean; sigma: > mean + spike_sigma x std
    # the seed's rule: 10 steps at 2x the recent mean (a ratio <= 1 would flag every loss)
    spike_ratio: float = between(1.0, 1e6, 2.0, low_open=True)
    spike_consecutive: int = between(1, _COUNT, 10)   # steps in a row above the bar before it counts
    spike_window: int = between(2, _COUNT, 50)        # accepted losses the mean (and std) are taken over
    spike_sigma: float = between(0.0, 1e6, 6.0, low_open=True)   # spike_rule=sigma: stds above the mean
    spike_warmup_steps: int = between(0, _COUNT, 20)  # no window bar until this many losses were accepted
    # Bars that hold from step 1 (nats; pretrain/resilience/spike.py). A loss above ln(model.vocab_size)
    # + this is worse than a uniform guess. An untrained model starts near ln V + std^2 x hidden / 2
    # (its logits' variance over 2): +0.01 for tiny, +1.6 for llama3_70b at init_std 0.02.
    spike_uniform_margin: float = between(0.0, 1e6, 3.0)
    # A loss this far above the phase's best level (its lowest mean of spike_consecutive losses in a
    # row) is a spike: a slow drift upward, which the window learns step by step.
    spike_best_margin: float = between(0.0, 1e6, 2.0, low_open=True)
    max_rollbacks: int = between(0, _COUNT, 3)        # more than this many rollbacks within ...
    rollback_window_steps: int = between(1, _COUNT, 1000)  # ... this many steps stops the run
    max_nonfinite_in_row: int = between(1, _COUNT, 30)     # skipped (NaN/inf) steps in a row: the run stops
    # no step finished for this long: dump stacks, exit 75
    watchdog_timeout_s: float = between(0.0, _SECONDS, 900.0, low_open=True)
    # the first step includes graph compilation
    first_step_timeout_s: float = between(0.0, _SECONDS, 3600.0, low_open=True)
    # write checkpoints from a background thread (off: on 2 CPU cores it costs more than it saves)
    async_save: bool = False
    # true: when no checkpoint in the run dir verifies, move them to checkpoints/quarantine/ and train
    # from step 0. false: that is an error, never a silent fresh start. A checkpoint that verifies is
    # always resumed from, so the key can stay in a command that a supervisor repeats.
    start_fresh: bool = False
    # true: a resume may continue on other data (a retrained or replaced tokenizer, another corpus,
    # another mixture, a checkpoint from a pretrain that did not record its data): a deliberate
    # change, logged as a `data_change` event. false: such a resume is refused in one line.
    allow_data_change: bool = False
    # A launch on one host (pretrain/launch/msrun.py) restarts a failed or hung job from its newest
    # verified checkpoint by itself, up to max_restarts times (0: never) within restart_window seconds
    # (torchrun's --max-restarts); past that, with elastic, it leaves out the rank that keeps failing
    # and goes on with the largest data-parallel size the rest allow, down to hardware.min_devices.
    max_restarts: int = between(0, _COUNT, 3)
    restart_window: float = between(0.0, _SECONDS, 3600.0, low_open=True)   # seconds the restarts count in
    elastic: bool = False                # past the restart budget, go on without the failing rank
    # `pretrain status` calls a live run degraded (exit 1) when its goodput so far (productive step time
    # / wall since the first start, pretrain/resilience/goodput.py) falls below this
    goodput_warn: float = between(0.0, 1.0, 0.7)


def _outside(**values: Any) -> Iterator[str]:
    """A line for each value outside the range its ResilienceConfig field declares (the same rule the
    config checks apply to the composed block, for a guard built from its own arguments)."""
    fields = {f.name: f for f in dataclasses.fields(ResilienceConfig)}
    for key, value in values.items():
        if value is not None:
            yield from range_problem(f"resilience.{key}", value, fields[key].metadata[RANGE])


def spike_problems(*, rule: str, ratio: float, consecutive: int, window: int, sigma: float,
                   warmup_steps: int, max_rollbacks: int, rollback_window_steps: int,
                   uniform_margin: float, best_margin: float) -> Iterator[str]:
    if rule not in SPIKE_RULES:
        yield f"resilience.spike_rule={rule!r}: must be one of {SPIKE_RULES}"
    yield from _outside(spike_ratio=ratio, spike_consecutive=consecutive, spike_window=window,
                        spike_sigma=sigma, spike_warmup_steps=warmup_steps, max_rollbacks=max_rollbacks,
                        rollback_window_steps=rollback_window_steps, spike_uniform_margin=uniform_margin,
                        spike_best_margin=best_margin)


def nonfinite_problems(max_consecutive: int) -> Iterator[str]:
    yield from _outside(max_nonfinite_in_row=max_consecutive)


def watchdog_problems(timeout_s: float, first_timeout_s: Optional[float]) -> Iterator[str]:
    yield from _outside(watchdog_timeout_s=timeout_s, first_step_timeout_s=first_timeout_s)


def restart_problems(max_restarts: int, restart_window: float) -> Iterator[str]:
    yield from _outside(max_restarts=max_restarts, restart_window=restart_window)


def spike_settings(res: Any) -> dict:
    """The block's keys as SpikeGuard's keyword arguments."""
    return dict(rule=res.spike_rule, ratio=res.spike_ratio, consecutive=res.spike_consecutive,
                window=res.spike_window, sigma=res.spike_sigma, warmup_steps=res.spike_warmup_steps,
                max_rollbacks=res.max_rollbacks, rollback_window_steps=res.rollback_window_steps,
                uniform_margin=res.spike_uniform_margin, best_margin=res.spike_best_margin)


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
