"""Ordered parallel map over worker processes, with a bounded number of tasks in flight.

Results come back in input order, so whatever runs through here produces the same output for
any number of workers; at most 2 x workers inputs are submitted ahead of the consumer, so
memory stays bounded however slow the consumer is.
"""
import itertools
import multiprocessing as mp
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from typing import Callable, Iterable, Iterator, Sequence, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def ordered_map(fn: Callable[[T], R], inputs: Iterable[T], workers: int,
                initializer: Callable[..., None], initargs: Sequence = ()) -> Iterator[R]:
    """fn over inputs in `workers` processes (in this process when workers <= 1). fn and
    initializer must be importable module-level functions; initializer sets up per-process state."""
    if workers <= 1:
        initializer(*initargs)
        yield from map(fn, inputs)
        return
    # spawn, not fork: the parent may already hold mindspore's threads, which fork would break.
    # An executor (unlike mp.Pool) fails loudly if a worker dies instead of respawning it forever.
    with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"), initializer=initializer,
                             initargs=tuple(initargs)) as pool:
        todo = iter(inputs)
        pending = deque(pool.submit(fn, x) for x in itertools.islice(todo, 2 * workers))
        while pending:
            result = pending.popleft().result()
            pending.extend(pool.submit(fn, x) for x in itertools.islice(todo, 1))
            yield result
