"""Pack stage: tokenized documents -> fixed-length rows that keep document boundaries.

A row holds `capacity` = seq_length + 1 tokens (the loader takes inputs x[:-1] and labels x[1:]),
each document ending with EOD, the tail padded with pad_id. A row also carries its segment
lengths (`seg_lens`: the length of each document piece in it, in order; padding is what is
left), from which the loader derives segment ids, position ids and the loss mask.

best_fit (default, Ding et al. 2024, "Fewer Truncations Improve Language Modeling"): documents
longer than a row are cut into row-sized pieces (the only truncation), then all pieces are
placed best-fit-decreasing: longest first, each into the open row with the least free room that
still fits it, O(N log L). A document that fits a row is never split.
concat: documents back to back, cut every `capacity` tokens (the classic GPT recipe): no padding
but most documents are split across rows.
"""
from bisect import bisect_left, insort
from dataclasses import dataclass
from typing import List, Optional, Tuple

import numpy as np



@dataclass
class Docs:
    """Tokenized documents back to back (each already ending with EOD)."""
    tokens: np.ndarray      # int32 [sum(lens)]
    lens: np.ndarray        # int32 [n]

    @staticmethod
    def empty() -> "Docs":
        return Docs(np.zeros(0, np.int32), np.zeros(0, np.int32))

    @staticmethod
    def join(parts: List["Docs"]) -> "Docs":
        parts = [p for p in parts if len(p.lens)]
        if not parts:
            return Docs.empty()
        return Docs(np.concatenate([p.tokens for p in parts]), np.concatenate([p.lens for p in parts]))

    @property
    def num_tokens(self) -> int:
        return int(self.tokens.size)


@dataclass
class Rows:
    ids: np.ndarray          # int32 [n, capacity]
    seg_lens: np.ndarray     # int32, all rows' segment lengths in row order
    seg_counts: np.ndarray   # int32 [n], segments per row

    @staticmethod
    def empty(capacity: int) -> "Rows":
        return Rows(np.zeros((0, capacity), np.int32), np.zeros(0, np.int32), np.zeros(0, np.int32))

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def num_tokens(self) -> int:
        return int(self.seg_lens.sum())


def best_fit_decreasing(sizes: np.ndarray, capacity: int) -> List[List[int]]:
    """Bins (lists of item indices) from best-fit-decreasing. Every size must be <= capacity.

    Open bins are indexed by free room: `rooms` is the sorted list of distinct free rooms that
    have a bin, `by_room` the bins with that room, so the best fit is one bisect."""
    bins: List[List[int]] = []
    rooms: List[int] = []
    by_room: dict = {}
    for i in np.argsort(-np.asarray(sizes), kind="stable").tolist():
        size = int(sizes[i])
        k = bisect_left(rooms, size)
        if k < len(rooms):
            room = rooms[k]
            b = by_room[room].pop()
            if not by_room[room]:
                del by_room[room]
                rooms.pop(k)
        else:
            room, b = capacity, len(bins)
            bins.append([])
        bins[b].append(i)
        left = room - size
        if left > 0:
            if left not in by_room:
                by_room[left] = []
                insort(rooms, left)
            by_room[left].append(b)
    return bins


def split_long(lens: np.ndarray, capacity: int) -> Tuple[np.ndarray, np.ndarray, int]:
    """Pieces (start offset, length) of documents; those longer than a row become full-row pieces
    plus a remainder. Returns starts, lengths and the number of documents that were split."""
    lens = np.asarray(lens, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]]) if len(lens) else lens
    long = lens > capacity
    if not long.any():
        return starts, lens, 0
    p_starts, p_lens = [], []
    for s, n in zip(starts.tolist(), lens.tolist()):
        while n > capacity:
            p_starts.append(s)
            p_lens.append(capacity)
            s, n = s + capacity, n - capacity
        p_starts.append(s)
        p_lens.append(n)
    return np.asarray(p_starts, np.int64), np.asarray(p_lens, np.int64), int(long.sum())


def rows_from_bins(tokens: np.ndarray, starts: np.ndarray, lens: np.ndarray, bins: List[List[int]],
                   capacity: int, pad_id: int) -> Rows:
    ids = np.full((len(bins), capacity), pad_id, dtype=np.int32)
    seg_lens, seg_counts = [], []
    for r, items in enumerate(bins):
        at = 0
        for i in items:
            s, n = int(starts[i]), int(lens[i])
            ids[r, at:at + n] = tokens[s:s + n]
            at += n
            seg_lens.append(n)
        seg_counts.append(len(items))
    return Rows(ids, np.asarray(seg_lens, np.int32), np.asarray(seg_counts, np.int32))


def pack_best_fit(docs: Docs, capacity: int, pad_id: int,
                  max_room: Optional[int] = None) -> Tuple[Rows, Docs, int]:
    """Best-fit-decreasing rows, plus the pieces of rows with more than `max_room` free tokens
    handed back (so a caller can pack them again with more company). Returns (rows, leftover,
    number of documents split for length)."""
    starts, lens, split = split_long(docs.lens, capacity)
    bins = best_fit_decreasing(lens, capacity)
    leftover = Docs.empty()
    if max_room is not None:
        room = [capacity - sum(int(lens[i]) for i in b) for b in bins]
        loose = [b for b, r in zip(bins, room) if r > max_room]
        bins = [b for b, r in zip(bins, room) if r <= max_room]
        items = [i for b in loose for i in b]
        if items:
            leftover = Docs(np.concatenate([docs.tokens[starts[i]:starts[i] + lens[i]] for i in items]),
                            lens[items].astype(np.int32))
    return rows_from_bins(docs.tokens, starts, lens, bins, capacity, pad_id), leftover, split


class ConcatPacker:
    """Concat-and-chunk over the whole stream: carries the unfinished row between calls."""

    def __init__(self, capacity: int, pad_id: int) -> None:
        self.capacity, self.pad_id = capacity, pad_id
        self._tokens = np.zeros(0, np.int32)
        self._ends = np.zeros(0, np.int64)      # document ends inside the buffer
        self._emitted = 0                       # tokens already emitted as rows
        self.truncated = 0

    def add(self, docs: Docs) -> Rows:
        base = self._emitted + self._tokens.size
        ends = base + np.cumsum(docs.lens, dtype=np.int64)
        starts = ends - docs.lens
        # A document is truncated when a row boundary falls strictly inside it.
        self.truncated += int(np.count_nonzero(starts // self.capacity != (ends - 1) // self.capacity))
        self._tokens = np.concatenate([self._tokens, docs.tokens])
        self._ends = np.concatenate([self._ends, ends - self._emitted])
        n = self._tokens.size // self.capacity
        return self._emit(n * self.capacity, n)

    def flush(self) -> Rows:
        return self._emit(self._tokens.size, 1 if self._tokens.size else 0)

    def _emit(self, used: int, n: int) -> Rows:
        cap = self.capacity
        if n == 0:
            return Rows.empty(cap)
        ids = np.full(n * cap, self.pad_id, np.int32)
        ids[:used] = self._tokens[:used]
        edges = np.union1d(self._ends[self._ends <= used], np.arange(cap, used + 1, cap))
        if used % cap:
            edges = np.union1d(edges, [used])
        seg_lens = np.diff(np.concatenate([[0], edges]))
        seg_row = (edges - 1) // cap
        # A segment that crosses a row edge was split by the edge above, so each lies in one row.
        seg_counts = np.bincount(seg_row, minlength=n)
        self._tokens = self._tokens[used:]
        self._ends = self._ends[self._ends > used] - used
        self._emitted += used
        return Rows(ids.reshape(n, cap), seg_lens.astype(np.int32), seg_counts.astype(np.int32))
