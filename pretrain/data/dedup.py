"""Dedup building blocks: exact duplicates by a normalised hash, near duplicates by MinHash-LSH.

prepare() dedups with partitioned tasks (pretrain.data.stages: hash partitions, LSH band
partitions, connected components keeping the first document of each). What follows is the
streaming Deduper that ingest() (and the benchmark's stage timing) uses, and the MinHasher both use.
Streaming rule, first seen wins: a document is dropped when an earlier kept document of the same source is
identical up to case/whitespace/punctuation (exact) or has an estimated word-shingle Jaccard
similarity of at least `threshold` (near, datasketch's MinHashLSH).

Signatures (the costly part) are computed where the cleaning runs, in worker processes
(MinHasher); the index that decides (Deduper) lives in one process. Its memory grows with the
number of kept documents (16 B per exact hash; the LSH band keys, about 1 kB per document at
128 permutations), not with their size.
"""
import zlib
from typing import List, Optional

import numpy as np

from pretrain.config.errors import PretrainDataError

_SEED = 1
_SLICE = 4096


class MinHasher:
    def __init__(self, num_perm: int, shingle: int) -> None:
        from datasketch import MinHash
        self.num_perm, self.shingle = num_perm, shingle
        # Drawing the permutations is most of a MinHash's construction cost: draw them once.
        proto = MinHash(num_perm=num_perm, seed=_SEED)
        self._permutations, self.scheme = proto.permutations, proto.scheme

    def signature(self, words: List[str]) -> np.ndarray:
        """MinHash values of the document's word n-gram shingles."""
        from datasketch import MinHash
        n = self.shingle
        shingles = {" ".join(words[i:i + n]) for i in range(max(1, len(words) - n + 1))}
        # crc32: a fast, stable 32-bit shingle hash (MinHash permutes it before taking minima).
        m = MinHash(num_perm=self.num_perm, seed=_SEED, hashfunc=zlib.crc32,
                    permutations=self._permutations, scheme=self.scheme)
        # update_batch builds a (shingles x num_perm) uint64 matrix: feed it in slices so a 1 MB
        # document costs a few MB, not ~0.5 GB.
        shingles = [s.encode() for s in shingles]
        for i in range(0, len(shingles), _SLICE):
            m.update_batch(shingles[i:i + _SLICE])
        return m.hashvalues


class Deduper:
    def __init__(self, cfg) -> None:
        self.exact, self.near = cfg.exact, cfg.near
        self._seen = set()
        self._count = 0
        if self.near:
            from datasketch import MinHashLSH
            try:
                self._lsh = MinHashLSH(threshold=cfg.threshold, num_perm=cfg.num_perm)
                self._scheme = MinHasher(cfg.num_perm, cfg.shingle).scheme
            except ValueError as exc:   # datasketch's own checks ("Too few permutation functions")
                raise PretrainDataError(f"data.dedup: {exc} (num_perm={cfg.num_perm}, threshold="
                                        f"{cfg.threshold}, shingle={cfg.shingle}; or data.dedup.near=false)"
                                        ) from None

    def check(self, digest: bytes, signature: Optional[np.ndarray]) -> Optional[str]:
        """None if the document (its words digest and MinHash signature) is new, and remember
        it; else the reason it is a duplicate."""
        if self.exact and digest in self._seen:
            return "exact_duplicate"
        if self.near:
            from datasketch import LeanMinHash
            m = LeanMinHash(seed=_SEED, hashvalues=signature, scheme=self._scheme)
            if self._lsh.query(m):
                return "near_duplicate"
            self._lsh.insert(self._count, m, check_duplication=False)
            self._count += 1
        if self.exact:
            self._seen.add(digest)
        return None
