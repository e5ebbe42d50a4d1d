"""The `resilience:` block of the run config, and the guards built from it.

The checkpoint cadence lives in train.* (save_every_steps, save_every_minutes,
keep_checkpoint_max); everything about surviving failures lives here."""
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional, Union

from pretrain.config.errors import PretrainConfigError
from pretrain.resilience.events import EventLog
from pretrain.resilience.nonfinite import NonFiniteGuard
from pretrain.resilience.signals import Watchdog
from pretrain.resilience.spike import SpikeGuard

HANG_STACKS_FILE = "hang_stacks.txt"      # in the run dir, beside events.jsonl


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
    # A launch on one host (pretrain/launch/msrun.py) restarts a failed or hung job from its newest
    # verified checkpoint by itself, up to max_restarts times within restart_window seconds
    # (torchrun's --max-restarts); past that, with elastic, it leaves out the rank that keeps failing
    # and goes on with the largest data-parallel size the rest allow, down to hardware.min_devices.
    max_restarts: int = 3
    restart_window: float = 3600.0
    elastic: bool = False


def spike_guard(res: Any) -> SpikeGuard:
    return SpikeGuard(rule=res.spike_rule, ratio=res.spike_ratio, consecutive=res.spike_consecutive,
                      window=res.spike_window, sigma=res.spike_sigma, warmup_steps=res.spike_warmup_steps,
                      max_rollbacks=res.max_rollbacks, rollback_window_steps=res.rollback_window_steps)


def nonfinite_guard(res: Any) -> NonFiniteGuard:
    return NonFiniteGuard(max_consecutive=res.max_nonfinite_in_row)


def watchdog(res: Any, run_dir: Union[str, os.PathLike], events: Optional[EventLog] = None,
             rank: int = 0) -> Watchdog:
    """Rank 0 writes its stacks to HANG_STACKS_FILE, rank r > 0 to hang_stacks.rank<r>.txt."""
    name = HANG_STACKS_FILE if rank == 0 else HANG_STACKS_FILE.replace(".txt", f".rank{rank}.txt")
    return Watchdog(res.watchdog_timeout_s, first_timeout_s=res.first_step_timeout_s,
                    stacks_path=Path(run_dir) / name, events=events)


def restart_budget(res: Any) -> Any:
    from pretrain.launch.supervise import RestartBudget
    if int(res.max_restarts) < 0 or float(res.restart_window) <= 0:
        raise PretrainConfigError(f"resilience.max_restarts={res.max_restarts}, restart_window="
                                  f"{res.restart_window}: need max_restarts >= 0 (0: never restart) and a "
                                  f"restart_window > 0 seconds")
    return RestartBudget(int(res.max_restarts), float(res.restart_window))


def problems(res: Any) -> Iterator[str]:
    """Each bad setting of the block as one line, for the config checks at compose time."""
    for build in (spike_guard, nonfinite_guard, lambda r: watchdog(r, "."), restart_budget):
        try:
            build(res)
        except PretrainConfigError as e:
            yield str(e)
