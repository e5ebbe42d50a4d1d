"""Interrupts of `python -m pretrain` end in one line and exit 128 + the signal (issue 40): which
exceptions stand for a stop signal, and Ctrl-C while mindspore loads (its C++ exit hook then fails
on the half-loaded module: a page of errors after the line, at times an abort)."""
import signal

from pretrain.app import signal_behind
from pretrain.resilience.signals import StopForced
from pretrain.sweep.interrupt import SweepInterrupted


def raised(make):
    try:
        make()
    except BaseException as exc:   # what the job's `except` sees
        return exc
    raise AssertionError("nothing raised")


def test_the_signal_behind_an_exception_follows_its_causes():
    def imported_during_ctrl_c():   # mindspore's C extension turns Ctrl-C into an ImportError
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise ImportError("initialization failed") from exc

    assert signal_behind(KeyboardInterrupt()) == signal.SIGINT
    assert signal_behind(StopForced(signal.SIGTERM, "killed")) == signal.SIGTERM
    assert signal_behind(SweepInterrupted(signal.SIGTERM)) == signal.SIGTERM
    assert signal_behind(raised(imported_during_ctrl_c)) == signal.SIGINT
    assert signal_behind(SystemExit(143)) == signal.SIGTERM   # data preparation's, after its own line
    assert signal_behind(SystemExit(2)) is None and signal_behind(ValueError("a bug")) is None
