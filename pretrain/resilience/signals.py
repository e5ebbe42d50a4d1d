"""Stopping on request, and not hanging forever.

GracefulStop turns SIGTERM/SIGINT (a scheduler's preemption notice, Ctrl-C) into a flag the
training loop reads after each step: it finishes the step, checkpoints and exits 0. A second
Ctrl-C, from a user who will not wait for that, raises StopForced; the entrypoint (pretrain.app)
says so in one line and exits 130.

Watchdog turns a step that never finishes (a stuck collective, a dead device) into a prompt exit
with every thread's Python stack, so a launcher can restart the run from its last checkpoint
instead of burning the allocation. Exit codes:
    HANG_EXIT_CODE (75, EX_TEMPFAIL in sysexits.h: "temporary failure, retry"): the watchdog thread
        saw no beat for timeout_s; stacks went to stderr and to the stacks file, a `hang` event
        was logged, and under a launcher the rank's exit status (STATUS_ENV names the file) says
        so, since os._exit skips the worker's own report.
    1: the backstop fired backstop_s later: the watchdog thread itself could not run (the hung
        code holds the GIL), so faulthandler's C thread wrote the stacks to stderr and exited.
        MindSpore graph execution releases the GIL, so this is the rare case.
"""
import faulthandler
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, Optional, Union

from pretrain.config.errors import PretrainRunError
from pretrain.config.resilience import require, watchdog_problems
from pretrain.io import write_atomic
from pretrain.resilience.events import EventLog

HANG_EXIT_CODE = 75
REARM_S = 1.0   # the watchdog's faulthandler backstop is re-armed at most this often (same interval)
# pretrain.worker names its exit-status file here (RUN_DIR/logs/rank_<r>.exit) for the watchdog
STATUS_ENV = "PRETRAIN_RANK_STATUS"


class StopForced(KeyboardInterrupt):
    """A stop signal again while the first one's checkpoint is under way: the sender will not wait
    for it. A KeyboardInterrupt, so whatever unwinds on Ctrl-C unwinds on it (the loop's files are
    closed, a launcher kills its ranks); `what` says what was cut short, for the one line the
    entrypoint prints (exit 128 + signum)."""

    def __init__(self, signum: int, what: str):
        super().__init__(signal.Signals(signum).name)
        self.signum, self.what = signum, what


class GracefulStop:
    """`with GracefulStop() as stop: ... if stop.requested: save and exit`. A second SIGINT raises
    StopForced (a KeyboardInterrupt), for a user who does not want to wait for the step to finish."""

    def __init__(self, signals: tuple = (signal.SIGTERM, signal.SIGINT)):
        self.signals = signals
        self.requested = False
        self.signum: Optional[int] = None
        self._previous: Dict[int, Any] = {}

    @property
    def signal_name(self) -> Optional[str]:
        return signal.Signals(self.signum).name if self.signum is not None else None

    def _handle(self, signum: int, frame: Any) -> None:
        # Only flags here: a handler that logged or printed could re-enter a write the main
        # thread was in the middle of.
        if self.requested and signum == signal.SIGINT:
            raise StopForced(signum, "training stopped at once, not waiting for the step and its checkpoint")
        if not self.requested:
            self.requested, self.signum = True, signum

    def __enter__(self) -> "GracefulStop":
        if threading.current_thread() is not threading.main_thread():
            raise PretrainRunError("GracefulStop must be entered in the main thread "
                                   "(Python delivers signals there)")
        for signum in self.signals:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}


class Watchdog:
    """A daemon thread that exits the process when beat() has not been called for timeout_s.
    first_timeout_s covers the first step (graph compile); beat(next_timeout_s=...) grants one
    longer interval ahead of a known slow step (a big save, an eval)."""

    def __init__(self, timeout_s: float, *, first_timeout_s: Optional[float] = None,
                 stacks_path: Union[str, os.PathLike, None] = None, events: Optional[EventLog] = None,
                 exit_code: int = HANG_EXIT_CODE, backstop_s: float = 60.0):
        require(watchdog_problems(timeout_s, first_timeout_s))
        self.timeout_s = timeout_s
        self.first_timeout_s = first_timeout_s if first_timeout_s is not None else timeout_s
        self.stacks_path = Path(stacks_path) if stacks_path is not None else None
        self.events = events
        self.exit_code = exit_code
        self.backstop_s = backstop_s
        self.last_step: Optional[int] = None
        self._interval = self.first_timeout_s
        self._last_beat = time.monotonic()
        self._armed_at = 0.0
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> "Watchdog":
        self._last_beat = time.monotonic()
        self._arm_backstop()
        self._thread = threading.Thread(target=self._run, name="watchdog", daemon=True)
        self._thread.start()
        return self

    def beat(self, step: Optional[int] = None, next_timeout_s: Optional[float] = None) -> None:
        """A step finished (`step`, when given, names it in the hang report)."""
        interval = next_timeout_s if next_timeout_s is not None else self.timeout_s
        self.last_step = step
        self._last_beat = time.monotonic()
        # Re-arming faulthandler's timer at every step of a short one cost 0.5% of the step here; one
        # armed less than REARM_S ago with the same interval fires at most REARM_S early, well within
        # its backstop_s margin past the watchdog's own deadline.
        if interval != self._interval or self._last_beat - self._armed_at >= REARM_S:
            self._interval = interval
            self._arm_backstop()

    def stop(self) -> None:
        self._stop.set()
        faulthandler.cancel_dump_traceback_later()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> "Watchdog":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _arm_backstop(self) -> None:
        self._armed_at = time.monotonic()
        # sys.__stderr__: faulthandler needs a real file descriptor, which a replaced sys.stderr may lack.
        faulthandler.dump_traceback_later(self._interval + self.backstop_s, exit=True, file=sys.__stderr__)

    def _run(self) -> None:
        poll = min(1.0, self.timeout_s / 4, self.first_timeout_s / 4)
        while not self._stop.wait(poll):
            waited = time.monotonic() - self._last_beat
            if waited > self._interval:
                self._fire(waited)

    def _fire(self, waited: float) -> None:
        where = f" (also in {self.stacks_path})" if self.stacks_path else ""
        after = "the first step" if self.last_step is None else f"the step after step {self.last_step}"
        message = (f"watchdog: {after} has not finished after {waited:.1f}s (limit {self._interval:g}s); "
                   f"Python stacks of all threads follow{where}; exiting with code {self.exit_code} so the "
                   f"launcher restarts the run from its last checkpoint")
        print(message, file=sys.__stderr__, flush=True)
        faulthandler.dump_traceback(file=sys.__stderr__, all_threads=True)
        if self.stacks_path is not None:
            self.stacks_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.stacks_path, "a", encoding="utf-8") as out:
                print(message, file=out, flush=True)
                faulthandler.dump_traceback(file=out, all_threads=True)
        if self.events is not None:
            self.events.log("hang", last_step=self.last_step, waited_s=round(waited, 1),
                            limit_s=self._interval, exit_code=self.exit_code,
                            stacks=str(self.stacks_path) if self.stacks_path else None)
        self._write_status(message)
        os._exit(self.exit_code)

    def _write_status(self, message: str) -> None:
        """The rank's exit status, as pretrain.worker writes it, so the launcher reports the hang
        (and restarts on it) instead of "ended without an exit status"."""
        path = os.environ.get(STATUS_ENV)
        if not path:
            return
        try:
            write_atomic(Path(path), json.dumps({"rank": int(os.environ.get("RANK_ID", "0")),
                                                 "exit": self.exit_code, "error": message.split(";")[0]}))
        except OSError as e:   # exiting anyway: the launcher then sees a rank without a status
            print(f"watchdog: could not write {path} ({e.strerror})", file=sys.__stderr__, flush=True)
