"""How the launcher reads its ranks (pretrain.launch.msrun.RankWatch) from the files
pretrain.worker leaves in RUN_DIR/logs/, with real processes standing in for msrun and the ranks."""

import json
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import pytest
from pretrain.io import write_atomic
from pretrain.launch.msrun import RankWatch
from pretrain.launch.tree import alive as _alive

TRACEBACK = """[WARNING] ME(1:1,MainProcess):2026-01-01 [mindspore/x.py:1] noisy warning
2026-01-01 10:00:00,000 - mindformers/log[x.py:1] - WARNING - Import PyNativeX failed
  general:  40%|####      | 4/10 [00:02<00:03, loss 8.1]watchdog: not this one, the last report counts
Traceback (most recent call last):
  File "/x/pretrain/train/step.py", line 9, in step
ValueError: the real error
"""


def sleeper():
    # its own session, as msrun starts each worker
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)


@pytest.fixture
def logs(tmp_path):
    d = tmp_path / "logs"
    d.mkdir()
    return d


def report(logs, rank, exit_code, error=""):
    write_atomic(logs / f"rank_{rank}.exit", json.dumps({"rank": rank, "exit": exit_code, "error": error}))


def started(logs, rank, pid):
    write_atomic(logs / f"rank_{rank}.pid", str(pid))


def test_a_failing_rank_is_reported_with_its_exit_code_error_and_last_error_lines(logs):
    msrun, rank0 = sleeper(), sleeper()
    try:
        started(logs, 0, rank0.pid)
        started(logs, 1, 999999)          # its status says it exited, so the pid is not consulted
        report(logs, 1, 1, "ValueError: the real error")
        (logs / "worker_1.log").write_text(TRACEBACK)
        failure = RankWatch(logs, 2).wait(msrun)
        assert (failure.rank, failure.exit, failure.retryable) == (1, 1, True)
        message = failure.message
        assert message.startswith("rank 1 of 2 exited with code 1 (ValueError: the real error)")
        assert "Traceback (most recent call last):" in message and "ValueError: the real error" in message
        assert "noisy warning" not in message and "PyNativeX" not in message and "4/10" not in message
        assert "watchdog: not this one" in message   # cut free of the progress bar it was printed after
        RankWatch(logs, 2).kill()
        assert not _alive(rank0.pid) and msrun.poll() is None   # the ranks go; msrun is the caller's
    finally:
        for p in (msrun, rank0):
            p.kill()
            p.wait()


def test_a_rank_that_vanished_without_a_status_is_reported_at_once(logs):
    msrun, rank0, rank1 = sleeper(), sleeper(), sleeper()
    try:
        started(logs, 0, rank0.pid)
        started(logs, 1, rank1.pid)
        rank1.kill()
        rank1.wait()
        failure = RankWatch(logs, 2).wait(msrun)
        assert (failure.rank, failure.exit) == (1, None)
        assert failure.message.startswith("rank 1 of 2 ended without an exit status")
        assert "(no log)" in failure.message
    finally:
        for p in (msrun, rank0):
            p.kill()
            p.wait()


@pytest.mark.parametrize("one_poll", [False, True], ids=["seen-apart", "seen-in-one-poll"])
def test_the_rank_that_failed_first_is_blamed_not_the_peer_that_failed_because_of_it(logs, one_poll):
    # rank 1 is killed; rank 0 fails in its next collective and even reports an exit status. Seen
    # together, the launcher blames rank 1 (the one an elastic job leaves out): the pidfds of the
    # ranks' processes say which ended first. When both ended before the launcher looked (a loaded
    # host), one wake-up cannot order them: a rank that reported a failure then is the one that
    # lost its peer, not the cause.
    msrun, rank0, rank1 = sleeper(), sleeper(), sleeper()
    try:
        started(logs, 0, rank0.pid)
        started(logs, 1, rank1.pid)
        watch = RankWatch(logs, 2)
        watch.deaths.watch({0: rank0.pid})   # rank 0's pidfd listed first
        watch.deaths.watch({1: rank1.pid})
        rank1.kill()
        rank1.wait()
        if not one_poll:
            watch.deaths.sleep(5.0)          # wakes as rank 1 ends
        report(logs, 0, 1, "RuntimeError: peer closed the connection")
        rank0.kill()
        rank0.wait()
        if one_poll:
            watch.deaths.sleep(5.0)          # both pidfds ready in this one poll
            assert set(watch.deaths.ended) == {0, 1}
        failure = watch.wait(msrun)
        assert failure.rank == 1 and "ended without an exit status" in failure.message
    finally:
        msrun.kill()
        msrun.wait()


@contextmanager
def node_1_head_killed(logs):
    """Two nodes' heads (their node_<r>.sh) and ranks as real processes; node 1's head killed, its
    rank still running."""
    from pretrain.launch.controller import NodeHeads
    procs = head0, head1, rank0, rank1 = [sleeper() for _ in range(4)]
    try:
        started(logs, 0, rank0.pid)
        started(logs, 1, rank1.pid)
        head1.kill()
        head1.wait()
        yield NodeHeads([head0, head1], logs), rank1
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_a_node_killed_head_first_is_blamed_on_its_rank_not_the_lowest_silent_one(logs):
    # node 1's tree killed process by process: its head ends first, its rank a moment later, and no
    # rank has reported. The head's exit counts only NODE_SETTLE_S later, by when rank 1 is found
    # dead: rank 1 is blamed, not rank 0 (the lowest rank without a status).
    with node_1_head_killed(logs) as (heads, rank1):
        threading.Timer(0.2, rank1.kill).start()
        failure = RankWatch(logs, 2).wait(heads, heads.failed)
    assert failure.rank == 1 and "ended without an exit status" in failure.message


def test_a_node_whose_head_failed_while_its_ranks_live_is_reported_once_settled(logs):
    from pretrain.launch.controller import NODE_SETTLE_S
    with node_1_head_killed(logs) as (heads, _):
        t0 = time.monotonic()
        failure = RankWatch(logs, 2).wait(heads, heads.failed)
        assert time.monotonic() - t0 >= NODE_SETTLE_S
    assert (failure.rank, failure.exit, failure.cause) == (-1, -9, "node")
    assert failure.message.startswith("node 1 of 2: its msrun exited with code -9")


@pytest.mark.parametrize("error", [
    "RuntimeError: The state of the cluster is error, total nodes num: 2, abnormal nodes num: 1",
    # its gradients' AllReduce timed out first (a CI run: node 0 was blamed for node 1's freeze)
    "RuntimeError: Launch kernel failed, name:Default/AllReduce-op0"])
def test_a_rank_told_its_peer_went_quiet_is_not_blamed_the_scheduler_names_the_quiet_one(logs, monkeypatch,
                                                                                         error):
    """Node 1 frozen (SIGSTOP): msrun's scheduler tells rank 0 the cluster is abnormal (or rank 0's
    collective times out), rank 0 exits 1, and the scheduler's exit file naming rank 1 as timed out
    comes a moment later. Blaming rank 0 (the first status seen) sent the restart after the healthy
    node."""
    from pretrain.launch.msrun import SCHEDULER_EXIT, scheduler_failed
    msrun, rank1 = sleeper(), sleeper()
    try:
        started(logs, 0, 999999)
        started(logs, 1, rank1.pid)
        report(logs, 0, 1, error)
        timed_out = json.dumps({"exit": 1, "port": 8118, "error": "The total number of timed out node is 1. "
                                "worker 1 is the first one timed out, please check its log."})
        threading.Timer(0.5, lambda: write_atomic(logs / SCHEDULER_EXIT, timed_out)).start()
        failure = RankWatch(logs, 2).wait(msrun, lambda: scheduler_failed(logs, 1))
        assert (failure.rank, failure.cause) == (1, "timeout") and failure.message.startswith("node 1 (rank 1) "
                                                                                             "timed out"), failure
        (logs / SCHEDULER_EXIT).unlink()   # the scheduler never names one: the rank's own failure, after a wait
        monkeypatch.setattr("pretrain.launch.msrun.PEER_NAMED_S", 1.0)
        t0 = time.monotonic()
        failure = RankWatch(logs, 2).wait(msrun, lambda: scheduler_failed(logs, 1))
        assert (failure.rank, failure.exit) == (0, 1) and time.monotonic() - t0 >= 1.0
    finally:
        for p in (msrun, rank1):
            p.kill()
            p.wait()


def test_success_needs_every_rank_to_report_zero(logs):
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    report(logs, 0, 0)
    report(logs, 1, 0)
    assert RankWatch(logs, 2).wait(done) is None
    (logs / "rank_1.exit").unlink()
    message = RankWatch(logs, 2).wait(done).message   # msrun gone, rank 1 never reported
    assert message.startswith("rank 1 of 2 never reported an exit status; msrun exited with code 0")


SAVING_RANK = ("import json, os, signal, sys, time\n"
               "signal.signal(signal.SIGTERM, lambda *a: None)   # the stop: finish the step, save\n"
               "signal.pause(); time.sleep(0.5)\n"
               "path = os.path.join(sys.argv[1], f'rank_{sys.argv[2]}.exit')\n"
               "json.dump({'rank': int(sys.argv[2]), 'exit': 0, 'error': ''}, open(path + '.tmp', 'w'))\n"
               "os.replace(path + '.tmp', path)\n")


def test_after_a_stop_request_the_ranks_not_msrun_or_its_scheduler_say_how_the_launch_ended(logs):
    """SIGTERM to the launcher, msrun, its scheduler and the ranks at once: msrun and the scheduler end
    at once, the ranks only after their checkpoint. The launch is the ranks' stop, not a rank that
    `never reported an exit status` nor a scheduler whose port was taken."""
    from pretrain.launch.msrun import SCHEDULER_EXIT, scheduler_failed
    msrun = sleeper()
    msrun.terminate()
    msrun.wait()
    write_atomic(logs / SCHEDULER_EXIT, json.dumps({"exit": 1, "port": "8118", "error": "RuntimeError: x"}))
    ranks = [subprocess.Popen([sys.executable, "-c", SAVING_RANK, str(logs), str(r)], start_new_session=True)
             for r in (0, 1)]
    try:
        for r, p in enumerate(ranks):
            started(logs, r, p.pid)
        time.sleep(0.3)   # the ranks' handlers are in place
        watch = RankWatch(logs, 2)
        assert watch.wait(msrun, lambda: scheduler_failed(logs)) is not None   # no stop asked: a failure
        watch.request_stop()   # SIGTERM to each rank, as the launcher passes the user's on
        assert watch.wait(msrun, lambda: scheduler_failed(logs)) is None
        assert sorted(watch.exits()) == [0, 1]
    finally:
        for p in ranks:
            p.kill()
            p.wait()


def test_a_zombie_counts_as_dead():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.time() + 10
    while _alive(child.pid) and time.time() < deadline:
        time.sleep(0.05)
    assert not _alive(child.pid)          # exited but not yet reaped: a zombie
    child.wait()
