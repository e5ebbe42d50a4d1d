"""Compiled kernels (numba) of the dedup view of a document: its words, their shingle units and its
MinHash signature.

Bit-identical to the pure-Python definitions they replace (hashing.dedup_words, zlib.crc32 of each
word shingle, dedup.MinHasher's MurmurHash3 pre-mix and affine permutations; tests/
test_data_units.py compares them), so the kept set and the cache keys do not change. They cost
about a tenth of the Python and numpy versions, whose per-shingle and per-document overheads made
near dedup cost as much CPU as tokenizing the same text.

Compiled on first use in a process (cached on disk by numba, so later processes only load it).
"""
import re
from typing import List, Sequence

import numpy as np
from numba import njit

from pretrain.data.hashing import UNSPACED, Words, dedup_view

_POLY = np.uint32(0xEDB88320)


def _crc_table() -> np.ndarray:
    table = np.zeros(256, np.uint32)
    for i in range(256):
        c = np.uint32(i)
        for _ in range(8):
            c = (c >> np.uint32(1)) ^ _POLY if c & np.uint32(1) else c >> np.uint32(1)
        table[i] = c
    return table


CRC_TABLE = _crc_table()


def _lower_table() -> np.ndarray:
    """For each code point of the basic multilingual plane, what hashing.dedup_words makes of it:
    its lower-case code point when that is a \\w character, -1 when it is not one (a separator), -2
    when lowering is not one code point to one or depends on context (final sigma; surrogates):
    such a document takes the Python path."""
    word = re.compile(r"\w")
    table = np.full(0x10000, -1, np.int32)
    for cp in range(0x10000):
        ch = chr(cp)
        low = ch.lower()
        if len(low) != 1 or ch == "\u03a3" or 0xD800 <= cp < 0xE000:
            table[cp] = -2
        elif word.match(low):
            table[cp] = ord(low)
    return table


def _alone_table() -> np.ndarray:
    """For each code point of the basic multilingual plane, whether it is of a script written
    without spaces (hashing.UNSPACED): a shingle unit alone."""
    table = np.zeros(0x10000, np.uint8)
    for lo, hi in UNSPACED:
        table[lo:min(hi + 1, 0x10000)] = 1
    return table


@njit(cache=True, nogil=True)
def utf8_words(text, table, alone, out, starts, ends):
    """The lower-cased \\w+ words of a UTF-8 text (bytes), joined by single spaces into `out`
    (UTF-8); each shingle unit's [start, end) in `out` into starts/ends (a word, or within a word each
    character of an unspaced script alone: hashing.unit_spans). Returns (bytes used, units), or
    (-1, 0) when a character needs the Python path (see _lower_table)."""
    n_out = 0
    n_units = 0
    in_word = False
    in_unit = False
    prev_alone = False
    i = 0
    n = len(text)
    while i < n:
        c = np.int64(text[i])
        if c < 0x80:
            cp = c
            i += 1
        elif c < 0xE0:
            cp = ((c & 0x1F) << 6) | (np.int64(text[i + 1]) & 0x3F)
            i += 2
        elif c < 0xF0:
            cp = ((c & 0x0F) << 12) | ((np.int64(text[i + 1]) & 0x3F) << 6) | (np.int64(text[i + 2]) & 0x3F)
            i += 3
        else:
            return -1, 0
        low = table[cp]
        if low == -2:
            return -1, 0
        if low >= 0:
            if not in_word:
                if n_out:
                    out[n_out] = 32
                    n_out += 1
                in_word = True
            is_alone = alone[cp] == 1
            if in_unit and (is_alone or prev_alone):
                ends[n_units] = n_out
                n_units += 1
                in_unit = False
            if not in_unit:
                starts[n_units] = n_out
                in_unit = True
            prev_alone = is_alone
            if low < 0x80:
                out[n_out] = low
                n_out += 1
            elif low < 0x800:
                out[n_out] = 0xC0 | (low >> 6)
                out[n_out + 1] = 0x80 | (low & 0x3F)
                n_out += 2
            else:
                out[n_out] = 0xE0 | (low >> 12)
                out[n_out + 1] = 0x80 | ((low >> 6) & 0x3F)
                out[n_out + 2] = 0x80 | (low & 0x3F)
                n_out += 3
        elif in_word:
            ends[n_units] = n_out
            n_units += 1
            in_word = False
            in_unit = False
    if in_word:
        ends[n_units] = n_out
        n_units += 1
    return n_out, n_units


@njit(cache=True, nogil=True)
def signatures(data, starts, ends, doc_words, shingle, table, a, b, out):
    """MinHash of each document d, into out[d]: words doc_words[d] .. doc_words[d + 1] - 1, each
    data[starts[w]:ends[w]], joined by one byte between words (as `data` holds them); a shingle is
    n consecutive words (all of them when fewer), hashed with crc32, pre-mixed with MurmurHash3's
    32-bit finalizer, then min over shingles of (a * h + b) mod 2**32 per permutation."""
    num_perm = len(a)
    mask = np.uint64(0xFFFFFFFF)
    hashes = np.empty(max(1, np.max(np.diff(doc_words))), np.uint32)
    for d in range(len(doc_words) - 1):
        lo, hi = doc_words[d], doc_words[d + 1]
        nw = hi - lo
        count = max(1, nw - shingle + 1)
        for k in range(count):
            crc = np.uint32(0xFFFFFFFF)
            if nw:
                s, e = starts[lo + k], ends[min(lo + k + shingle, hi) - 1]
                for i in range(s, e):
                    crc = table[(crc ^ data[i]) & np.uint32(0xFF)] ^ (crc >> np.uint32(8))
            h = np.uint64(crc ^ np.uint32(0xFFFFFFFF))
            h ^= h >> np.uint64(16)
            h = (h * np.uint64(0x85EBCA6B)) & mask
            h ^= h >> np.uint64(13)
            h = (h * np.uint64(0xC2B2AE35)) & mask
            h ^= h >> np.uint64(16)
            hashes[k] = np.uint32(h)
        # permutation-major, a branch-free min over the shingles: the loop the compiler vectorises
        # (3x faster than min-updating all permutations shingle by shingle)
        sig = out[d]
        for p in range(num_perm):
            ap, bp = a[p], b[p]
            m = np.uint32(0xFFFFFFFF)
            for k in range(count):
                m = min(m, np.uint32(ap * hashes[k] + bp))
            sig[p] = m


@njit(cache=True, nogil=True)
def batch_words(data, doc_ends, table, alone, out, starts, ends, out_ends, unit_ends):
    """utf8_words of each document d of a batch, data[doc_ends[d - 1]:doc_ends[d]], one after another
    into out/starts/ends (each document's unit bounds relative to its own part of `out`); the end of
    its part of `out` into out_ends[d] and of its units into unit_ends[d], or -1 into out_ends[d]
    (nothing written) when it needs the Python path."""
    o = 0
    u = 0
    lo = 0
    for d in range(len(doc_ends)):
        hi = doc_ends[d]
        used, n = utf8_words(data[lo:hi], table, alone, out[o:], starts[u:], ends[u:])
        if used >= 0:
            o += used
            u += n
            out_ends[d] = o
        else:
            out_ends[d] = -1
        unit_ends[d] = u
        lo = hi
    return o


_TABLE: list = []


def views_of(encoded: Sequence[bytes], texts: Sequence[str]) -> List[Words]:
    """The Words of each document (its UTF-8 bytes and its text) by one compiled scan of them all: a
    call per document cost more than the scan of a short Chinese one. hashing.dedup_view itself for
    a text with a character beyond it (see _lower_table: outside the basic multilingual plane, final
    sigma)."""
    if not _TABLE:
        _TABLE.extend((_lower_table(), _alone_table()))
    data = np.frombuffer(b"".join(encoded), np.uint8)
    doc_ends = np.cumsum(np.fromiter(map(len, encoded), np.int64, count=len(encoded)))
    out = np.empty(3 * len(data), np.uint8)     # a lowered character may take 3 bytes for 2
    # at most a unit per two input bytes of a document (+1): a unit of one ASCII byte has a separator
    # or a 3-byte unspaced character beside it; every other character takes 2 bytes or more
    starts = np.empty(len(data) // 2 + len(encoded), np.int64)
    ends = np.empty_like(starts)
    out_ends, unit_ends = np.empty(len(encoded), np.int64), np.empty(len(encoded), np.int64)
    batch_words(data, doc_ends, *_TABLE, out, starts, ends, out_ends, unit_ends)
    joined = out[:max(0, int(out_ends.max(initial=0)))].tobytes()
    views = []
    o = u = 0
    for text, o_end, u_end in zip(texts, out_ends.tolist(), unit_ends.tolist()):
        if o_end < 0:
            views.append(dedup_view(text))
            continue
        views.append(Words(joined[o:o_end], starts[u:u_end], ends[u:u_end]))
        o, u = o_end, u_end
    return views


def signatures_of(views: Sequence[Words], shingle: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The MinHash (uint32[len(a)]) of each document, as dedup.MinHasher.signature computes it, by
    one compiled call for them all: [len(views), len(a)]."""
    out = np.empty((len(views), len(a)), np.uint32)
    if not views:
        return out
    sizes = np.fromiter(map(len, (w.joined for w in views)), np.int64, count=len(views))
    shift = np.repeat(np.cumsum(sizes) - sizes, np.fromiter(map(len, views), np.int64, count=len(views)))
    starts = np.concatenate([w.starts for w in views]) + shift
    ends = np.concatenate([w.ends for w in views]) + shift
    doc_words = np.concatenate([[0], np.cumsum([len(w) for w in views])]).astype(np.int64)
    signatures(np.frombuffer(b"".join(w.joined for w in views), np.uint8), starts, ends, doc_words,
               shingle, CRC_TABLE, a, b, out)
    return out
