"""GracefulStop with real signals; Watchdog in subprocesses (it ends its process on purpose)."""
import os
import signal
import time

import pytest

from pretrain.resilience.signals import GracefulStop, StopForced


def test_sigterm_sets_requested_and_handlers_are_restored():
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with GracefulStop() as stop:
        assert not stop.requested
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.01)                    # Python runs the handler at the next bytecode boundary
        assert stop.requested and stop.signal_name == "SIGTERM"
        os.kill(os.getpid(), signal.SIGTERM)   # a repeated SIGTERM changes nothing
        time.sleep(0.01)
        assert stop.signal_name == "SIGTERM"
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_second_sigint_raises_stop_forced_a_keyboard_interrupt_that_says_what_was_cut_short():
    with GracefulStop() as stop:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)
        assert stop.requested and stop.signal_name == "SIGINT"
        with pytest.raises(StopForced) as forced:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)
    assert isinstance(forced.value, KeyboardInterrupt) and forced.value.signum == signal.SIGINT
    assert "not waiting for the step and its checkpoint" in forced.value.what   # the entrypoint's one line


def test_watchdog_rearms_its_backstop_at_most_once_a_second_unless_the_interval_changes(monkeypatch):
    from pretrain.resilience import signals

    clock, armed = [100.0], []
    monkeypatch.setattr(signals.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(signals.faulthandler, "dump_traceback_later",
                        lambda timeout, **kw: armed.append((clock[0], timeout)))
    dog = signals.Watchdog(10.0, first_timeout_s=60.0, backstop_s=30.0)
    dog._arm_backstop()                        # as start() arms it, without the thread
    for _ in range(10):                        # ten steps 0.09 s apart: one re-arm for the interval change
        clock[0] += 0.09
        dog.beat(1)
    assert armed == [(100.0, 90.0), (100.09, 40.0)]
    clock[0] += 1.0
    dog.beat(2)                                # a second later: re-armed from now
    dog.beat(3, next_timeout_s=60.0)           # a slow step ahead: at once, with the longer interval
    assert armed[2:] == [(clock[0], 40.0), (clock[0], 90.0)]
    assert dog._interval == 60.0
