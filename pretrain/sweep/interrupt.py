"""SIGINT / SIGTERM during a sweep: the jobs that finished summarised, one line, exit 130 / 143.

Hydra's basic launcher runs a sweep's jobs one after another in this process and knows nothing
of signals: Ctrl-C raised KeyboardInterrupt wherever the sweep was (an 84-line traceback, and no
summary, since on_multirun_end is never called), SIGTERM killed it silently. From
on_multirun_start (pretrain.sweep.summary.SweepSummary) both raise SweepInterrupted in the main
thread instead; it unwinds Hydra's launcher like an error, and the entrypoint (pretrain.app.main)
writes summary.csv/md/png of the rows the finished jobs wrote and says how many were left
(pretrain.sweep.summary.after_interrupt).

A job that handles the signal itself (a training run stops at a checkpoint: the loop's
GracefulStop, msrun's forwarding; data preparation ends its workers) ends first, and then the
sweep (pretrain.app.run_job calls stop()). Signals after the first are ignored: the summary of
what finished is a second's work, and it is what the user stopped the sweep to see.
"""
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, NoReturn, Optional

from omegaconf import DictConfig

# lazy imports (hydra): guarded, as its basic sweeper is Hydra's private API; the count is never worth
# failing a sweep

SIGNALS = (signal.SIGINT, signal.SIGTERM)
BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


class SweepInterrupted(BaseException):
    """A BaseException, so neither Hydra's job runner (it keeps an Exception as the job's result)
    nor any `except Exception` on the way stops it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass
class Sweep:
    sweep_dir: Path                   # as the sweep's config names it (relative to where it started)
    planned: Optional[int]            # jobs the sweep would run (None: a sweeper we cannot ask)
    received: List[int] = field(default_factory=list)
    previous: Dict[int, Any] = field(default_factory=dict)


_sweep: Optional[Sweep] = None       # the sweep running in this process (one at a time)


def begin(config: DictConfig) -> None:
    """From on_multirun_start: SIGINT / SIGTERM end the sweep with its summary."""
    global _sweep
    _sweep = Sweep(Path(str(config.hydra.sweep.dir)), planned_jobs(config))
    if threading.current_thread() is not threading.main_thread():   # Python delivers signals there only
        return
    for s in SIGNALS:
        if signal.getsignal(s) is not signal.SIG_IGN:   # e.g. SIGINT of a sweep started with `&`
            _sweep.previous[s] = signal.signal(s, _handle)


def end() -> None:
    """From on_multirun_end: every job ran; the handlers as they were."""
    global _sweep
    if _sweep is not None:
        for s, handler in _sweep.previous.items():
            signal.signal(s, handler)
    _sweep = None


def _handle(signum: int, frame: Any) -> None:
    if _sweep is not None and _sweep.received:   # unwinding already
        return
    stop(signum)


def stop(signum: int) -> NoReturn:
    """End the sweep now, for signal `signum` (received here, or by the job that just ended)."""
    if _sweep is not None:
        _sweep.received.append(signum)
    raise SweepInterrupted(signum)


def current() -> Optional[Sweep]:
    """The sweep this process runs (its dir, the jobs planned), None outside one."""
    return _sweep


def planned_jobs(config: DictConfig) -> Optional[int]:
    """How many jobs Hydra's basic sweeper runs: the product of the swept values, computed as it
    computes them. None for another sweeper, or for anything it cannot tell (the number is only
    for the line an interrupted sweep ends with, never worth failing the sweep for)."""
    try:
        if config.hydra.sweeper._target_ != BASIC_SWEEPER:
            return None
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
        from hydra.core.global_hydra import GlobalHydra
        from hydra.core.override_parser.overrides_parser import OverridesParser
        params = [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
        parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
        overrides = parser.parse_overrides(params + list(config.hydra.overrides.task))
        batches = BasicSweeper.split_arguments(overrides, None)
        return sum(len(batch) for batch in batches)
    except Exception:   # see the docstring
        return None
