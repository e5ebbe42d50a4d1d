"""The resilience guards built from the run config's `resilience:` block (pretrain/config/resilience.py)."""
import os
from pathlib import Path
from typing import Any, Optional, Union

from pretrain.config.resilience import spike_settings
from pretrain.resilience.events import EventLog
from pretrain.resilience.nonfinite import NonFiniteGuard
from pretrain.resilience.signals import Watchdog
from pretrain.resilience.spike import SpikeGuard

HANG_STACKS_FILE = "hang_stacks.txt"      # in the run dir, beside events.jsonl


def spike_guard(res: Any, vocab_size: Optional[int] = None) -> SpikeGuard:
    """`vocab_size` (model.vocab_size) sets the uniform bar: a loss worse than a uniform guess."""
    return SpikeGuard(**spike_settings(res), vocab_size=vocab_size)


def nonfinite_guard(res: Any) -> NonFiniteGuard:
    return NonFiniteGuard(max_consecutive=res.max_nonfinite_in_row)


def watchdog(res: Any, run_dir: Union[str, os.PathLike], events: Optional[EventLog] = None,
             rank: int = 0) -> Watchdog:
    """Rank 0 writes its stacks to HANG_STACKS_FILE, rank r > 0 to hang_stacks.rank<r>.txt."""
    name = HANG_STACKS_FILE if rank == 0 else HANG_STACKS_FILE.replace(".txt", f".rank{rank}.txt")
    return Watchdog(res.watchdog_timeout_s, first_timeout_s=res.first_step_timeout_s,
                    stacks_path=Path(run_dir) / name, events=events)
