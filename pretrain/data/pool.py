"""Ordered parallel map over worker processes, with a bounded number of tasks in flight.

Results come back in input order, so whatever runs through here produces the same output for
any number of workers; at most 2 x workers inputs are submitted ahead of the consumer, so
memory stays bounded however slow the consumer is.

Workers never outlive the map: when it ends early (an error, an interrupt, the consumer closing
it) they are terminated, not waited for. Ctrl-C reaches every process of the terminal's
foreground group, workers included; they ignore SIGINT and leave the stop to the parent, so an
interrupt prints nothing from them. On Linux a worker also dies with its parent (a kill -9 of
the parent leaves no orphans computing for minutes).
"""
import ctypes
import itertools
import multiprocessing as mp
import os
import signal
import sys
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator, Optional, Sequence, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_PR_SET_PDEATHSIG = 1


def _worker_init(parent: int, initializer: Callable[..., None], initargs: Sequence) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})   # blocked since the spawn, see below
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass
        if os.getppid() != parent:     # the parent died before prctl took effect
            os._exit(1)
    initializer(*initargs)


@contextmanager
def _sigint_blocked() -> Iterator[None]:
    """Processes spawned inside start with SIGINT blocked (the mask survives fork and exec), so a
    Ctrl-C during a worker's start-up cannot raise KeyboardInterrupt there before _worker_init
    ignores it. In this process the signal stays pending and is handled on leaving."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _stop(pool: ProcessPoolExecutor) -> None:
    """Terminate the workers now (their running tasks are lost, which is the point)."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(5)
        if p.is_alive():
            p.kill()
            p.join()
    # A worker killed while sending its result leaves the executor's manager thread blocked in
    # recv() on the result pipe, and the interpreter would wait for that thread forever at exit.
    # With the workers gone, this process holds the pipe's last write end: closing it turns the
    # wait into EOF, the pool counts as broken and the thread ends.
    queue = getattr(pool, "_result_queue", None)
    writer = getattr(queue, "_writer", None)
    if writer is not None:
        writer.close()
    pool.shutdown(wait=False, cancel_futures=True)


def make_pool(workers: int, initializer: Callable[..., None], initargs: Sequence = ()) -> ProcessPoolExecutor:
    """`workers` processes for ordered_map, to reuse across several maps (pass it as `pool`)."""
    # spawn, not fork: the parent may already hold mindspore's threads, which fork would break.
    # An executor (unlike mp.Pool) fails loudly if a worker dies instead of respawning it forever.
    return ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"), initializer=_worker_init,
                               initargs=(os.getpid(), initializer, tuple(initargs)))


def ordered_map(fn: Callable[[T], R], inputs: Iterable[T], workers: int,
                initializer: Callable[..., None], initargs: Sequence = (),
                pool: Optional[ProcessPoolExecutor] = None) -> Iterator[R]:
    """fn over inputs in `workers` processes (in this process when workers <= 1). fn and
    initializer must be importable module-level functions; initializer sets up per-process state.
    Close the iterator (contextlib.closing) when not consuming it to the end.
    pool: a make_pool() to use (not shut down at the end; stopped, and then unusable, on an error)."""
    if workers <= 1:
        initializer(*initargs)
        yield from map(fn, inputs)
        return
    own = pool is None
    pool = pool or make_pool(workers, initializer, initargs)

    def submit(x: T):
        with _sigint_blocked():          # a submit may start a worker
            return pool.submit(fn, x)

    try:
        todo = iter(inputs)
        pending = deque(submit(x) for x in itertools.islice(todo, 2 * workers))
        while pending:
            result = pending.popleft().result()
            pending.extend(submit(x) for x in itertools.islice(todo, 1))
            yield result
    except BaseException:
        _stop(pool)
        raise
    if own:
        pool.shutdown()
