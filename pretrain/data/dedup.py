"""Dedup building blocks: MinHash signatures and LSH band keys of a document (near duplicates),
and the check of the near-dedup settings.

prepare() dedups with partitioned tasks (pretrain.data.stages): exact duplicates by a hash of the
document's words (hash partitions), near duplicates by MinHash-LSH (band partitions: documents
sharing a band key are candidates; connected components of the candidates keep their first
document). Rule, first wins: a document is dropped when an earlier document of the same source
is identical up to case/whitespace/punctuation (exact) or shares an LSH bucket with one (near:
estimated shingle Jaccard similarity around `threshold`, datasketch's MinHashLSH banding).

What the Jaccard similarity is of: sets of shingles of `shingle` (n) consecutive units, a unit being
a word in scripts written with spaces and a character in those written without (hashing.UNSPACED:
Han, kana, Thai...). So `threshold` means word n-gram overlap for English prose and character
n-gram overlap for Chinese, and both at once in a mixed document (pretrain.bench.recall measures
the share of near copies found per kind and Jaccard band, beside datasketch's MinHashLSH).
"""
import zlib
from typing import Optional, Sequence

import numpy as np

from pretrain.config.errors import PretrainDataError
from pretrain.data import lsh_default
from pretrain.data.hashing import Words, dedup_view

# lazy imports (datasketch, pretrain.data.fasthash): datasketch +~1.4 s (scipy), the compiled hashes
# +~0.4 s (numba), on every import of the data package; only near-duplicate work loads them

_SEED = 1
_SLICE = 4096


class MinHasher:
    """datasketch's MinHash (its default "affine32" scheme, seed _SEED, crc32 shingle hashes), computed
    for a whole document at once: every shingle hashed straight from the document's UTF-8 bytes (no
    shingle strings built), the MurmurHash3 pre-mix and the 128 affine permutations as uint32 array
    operations over all shingles. Bit-identical to MinHash.update_batch (tests/test_data_units.py
    compares them), about 3x faster."""

    def __init__(self, num_perm: int, shingle: int, permutations: Optional[Sequence] = None) -> None:
        """permutations: datasketch's (a, b) for num_perm (lsh_params' "a", "b"): given, this
        process never imports datasketch (and scipy beneath it, ~0.3 s of CPU per process)."""
        self.num_perm, self.shingle = num_perm, shingle
        a, b = permutations if permutations is not None else _permutations(num_perm)
        self._a, self._b = (np.asarray(x, np.uint32)[None, :] for x in (a, b))

    def signatures_of(self, views, compiled: bool) -> np.ndarray:
        """signature() of each hashing.Words, [len(views), num_perm]: compiled (fasthash, one call for
        them all, the same values) or not."""
        if compiled:
            from pretrain.data.fasthash import signatures_of
            return signatures_of(views, self.shingle, self._a[0], self._b[0])
        out = np.empty((len(views), self.num_perm), np.uint32)
        for row, words in zip(out, views):
            row[:] = self.signature(words)
        return out

    def shingle_hashes(self, words) -> np.ndarray:
        """crc32 of each unit n-gram (the UTF-8 bytes of the words joined by one space, from the
        first unit's start to the last's end), as uint32; a document of fewer than n units is one
        shingle of all of them. words: a list or a hashing.Words."""
        view = words if isinstance(words, Words) else dedup_view(words)
        n, nw = self.shingle, len(view)
        if not nw:
            return np.asarray([zlib.crc32(b"")], np.uint32)
        count = max(1, nw - n + 1)
        ends = view.ends[np.minimum(np.arange(count) + n, nw) - 1]
        # all in C (map of builtins over zero-copy memoryview slices): this loop is most of the cost
        pieces = map(memoryview(view.joined).__getitem__,
                     map(slice, view.starts[:count].tolist(), ends.tolist()))
        return np.fromiter(map(zlib.crc32, pieces), np.uint32, count=count)

    def signature(self, words) -> np.ndarray:
        """MinHash values (uint32) of the document's unit n-gram shingles (a list or a Words)."""
        hv = np.unique(self.shingle_hashes(words))
        # MurmurHash3's 32-bit finalizer (datasketch's pre-mix), wrapping uint32 arithmetic
        hv ^= hv >> np.uint32(16)
        hv *= np.uint32(0x85EBCA6B)
        hv ^= hv >> np.uint32(13)
        hv *= np.uint32(0xC2B2AE35)
        hv ^= hv >> np.uint32(16)
        out = np.full(self.num_perm, np.iinfo(np.uint32).max, np.uint32)
        for i in range(0, len(hv), _SLICE):      # slices: a 1 MB document costs a few MB, not ~0.5 GB
            np.minimum(out, (hv[i:i + _SLICE, None] * self._a + self._b).min(axis=0), out=out)
        return out


def _permutations(num_perm: int) -> tuple:
    from datasketch import MinHash
    proto = MinHash(num_perm=num_perm, seed=_SEED)      # drawing them is most of a MinHash's cost
    if proto.scheme != "affine32" or proto.permutations[0].dtype != np.uint32:
        raise RuntimeError(f"datasketch {proto.scheme!r} MinHash: pretrain computes 'affine32' itself")
    return tuple(proto.permutations)


def lsh_params(dedup: dict) -> dict:
    """What a read task needs for near dedup, computed once by the driver: the LSH shape (bands,
    rows per band: datasketch's choice for MinHashLSH at the threshold) and the permutations."""
    if _default(dedup):
        return {"bands": lsh_default.BANDS, "width": lsh_default.WIDTH, "a": list(lsh_default.A),
                "b": list(lsh_default.B)}
    from datasketch.lsh import _optimal_param
    bands, width = _optimal_param(dedup["threshold"], dedup["num_perm"], 0.5, 0.5)
    a, b = _permutations(dedup["num_perm"])
    return {"bands": int(bands), "width": int(width), "a": a.tolist(), "b": b.tolist()}


def _default(dedup: dict) -> bool:
    return (float(dedup["threshold"]), int(dedup["num_perm"])) == lsh_default.SETTINGS


def check_settings(dedup: dict) -> None:
    """Near-dedup settings datasketch's LSH refuses, as one line naming the keys (checked once,
    before any task)."""
    if not dedup["near"] or _default(dedup):    # (settings datasketch took: lsh_default)
        return
    from datasketch import MinHashLSH
    try:
        MinHashLSH(threshold=dedup["threshold"], num_perm=dedup["num_perm"])
    except ValueError as exc:   # datasketch's own checks ("Too few permutation functions")
        raise PretrainDataError(f"data.dedup: {exc} (num_perm={dedup['num_perm']}, threshold="
                                f"{dedup['threshold']}, shingle={dedup['shingle']}; or data.dedup.near=false)"
                                ) from None


_FNV_OFFSET, _FNV_PRIME = np.uint64(0xCBF29CE484222325), np.uint64(0x100000001B3)
_MIX = (np.uint64(30), np.uint64(0xBF58476D1CE4E5B9), np.uint64(27), np.uint64(0x94D049BB133111EB),
        np.uint64(31))


def band_keys(signatures: np.ndarray, bands: int, width: int) -> np.ndarray:
    """The LSH band keys [m, bands] (uint64) of m signatures [m, num_perm]: documents sharing one are
    near-duplicate candidates. Each band's `width` values are folded by FNV-1a over the values and
    spread by splitmix64's finalizer (the near stage partitions by a key's low bits), for all the
    documents of a read task at once: a cryptographic hash per band and document (blake2b, before)
    cost ~0.1 ms a document, as much as its MinHash."""
    m = len(signatures)
    values = signatures[:, :bands * width].reshape(m, bands, width).astype(np.uint64)
    key = np.full((m, bands), _FNV_OFFSET, np.uint64)
    for j in range(width):
        key ^= values[:, :, j]
        key *= _FNV_PRIME
    s1, m1, s2, m2, s3 = _MIX
    key ^= key >> s1
    key *= m1
    key ^= key >> s2
    key *= m2
    key ^= key >> s3
    return key
