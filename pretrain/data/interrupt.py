"""SIGINT / SIGTERM while preparing data: unwind cleanly, say so in one line, exit 130 / 143.

Python's defaults are wrong for a long build: SIGINT raises KeyboardInterrupt wherever the
program is (a traceback, and from every pool worker too), and SIGTERM kills the process on the
spot, skipping all cleanup (temp directories stay, pool workers are orphaned). Inside
`stop_on_signals()` both raise Interrupted in the main thread instead. It unwinds like an error
(fsutil.building removes the temp directory, pool.ordered_map terminates its workers) and
leaves the block as one line on stderr and SystemExit(128 + signal number), the exit status a
shell gives a process the signal stopped.
"""
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Iterator, List

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """Raised by the signal handler; a BaseException so no `except Exception` on the way keeps it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def stop_on_signals(what: str, note: str = "") -> Iterator[None]:
    """Run the block so that SIGINT/SIGTERM stop it cleanly (see the module doc). `what` names the
    work in the message ("data preparation"); `note` is appended to it. Outside the main thread
    (where Python delivers no signals) and for a signal the process ignores, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: List[int] = []

    def handle(signum: int, frame) -> None:
        if received:        # unwinding already: a second Ctrl-C must not cut the cleanup short
            return
        received.append(signum)
        raise Interrupted(signum)

    previous = {}
    for s in SIGNALS:
        if signal.getsignal(s) is not signal.SIG_IGN:   # e.g. SIGINT of a job started with `&`
            previous[s] = signal.signal(s, handle)
    try:
        yield
    except BaseException:
        if not received:
            raise
        # Whatever unwound the block (Interrupted itself, or what a C library made of it, such
        # as sentencepiece's RuntimeError), the signal is the reason.
        name = signal.Signals(received[0]).name
        print(f"interrupted ({name}): {what} stopped; workers ended and temp files removed{note}",
              file=sys.stderr, flush=True)
        raise SystemExit(128 + received[0]) from None
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
