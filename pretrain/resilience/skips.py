"""Data windows skipped after a loss spike, and the step -> batch mapping that jumps over them.

The loader is a pure function of the data index (BatchLoader.batch(i)), so skipping data needs no
loader state: phase step k reads the k-th data index that is not inside a skipped window. The
windows (inclusive [lo, hi] data indices, per phase) are part of the checkpointed TrainState, so
a run resumed after a rollback reads the same stream the rolled-back run read."""
from typing import List, Sequence

Windows = List[List[int]]


def data_index(step: int, windows: Sequence[Sequence[int]]) -> int:
    """The data index phase step `step` (0-based) reads, given sorted, disjoint skipped windows."""
    index = step
    for lo, hi in windows:
        if index >= lo:
            index += hi - lo + 1
        else:
            break
    return index


def add_window(windows: Sequence[Sequence[int]], lo: int, hi: int) -> Windows:
    """`windows` plus [lo, hi], merged into sorted, disjoint windows."""
    if lo > hi:
        raise ValueError(f"empty data window [{lo}, {hi}]")
    merged: Windows = []
    for a, b in sorted([[int(a), int(b)] for a, b in windows] + [[lo, hi]]):
        if merged and a <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return merged
