"""Tokenize a chunk of documents: sentencepiece, EOD after each, as one int32 stream (pack.Docs).

Most of a corpus is the same few hundred thousand words over and over, and sentencepiece
segments each word the same way wherever it stands, when the model allows it (WordCache.fits):
a BPE model (a unigram model's Viterbi breaks ties between equal segmentations by the rounding
of the score accumulated before the word, so a word alone can come out otherwise), identity
normalization, a space-escaped dummy prefix, and no piece that runs from a word's letters into
the next word's whitespace, or through a newline. Then a document's ids are the ids of its units
(" *[^ \\n]+", runs of spaces, "\\n"; the document read with a leading space for the dummy
prefix) one after another, and each distinct unit is encoded once per worker, not once per
occurrence. tests/test_encode.py checks the ids equal sentencepiece's own, document by document.
"""
import itertools
import re
from typing import List, Optional, Sequence

import numpy as np

from pretrain.data.pack import Docs

_UNIT = re.compile(r" *[^ \n]+|\n| +")
# Characters that a non-identity normalization (NFKC, nmt_*, case folding), whitespace
# collapsing, a missing or suffix dummy prefix would change: the model's normalize() of this
# must be the text with its spaces escaped and one dummy prefix.
_PROBE = "Ａﬁ A\u00a0b\t\u3000c  d \r\ne\u0301 Σς ½ "
_BPE = 2                    # sentencepiece's TrainerSpec.ModelType
_ESCAPE = "\u2581"          # sentencepiece's space; a document holding it is one unit
MAX_UNITS = 1 << 19         # units a WordCache keeps (~60 MB of strings and index) before it starts
MAX_TOKENS = 1 << 22        # again, or ids (16 MB; a long unit, minified code, can hold many)


class WordCache:
    """The ids of each distinct unit, in context (after another unit), for one sentencepiece
    model: one flat id array with each unit's start and length, so a chunk's ids are one
    vectorised gather."""

    def __init__(self, sp) -> None:
        self.sp = sp
        self.skip = len(sp.encode("\n"))   # the dummy prefix and the newline each miss is encoded after
        self._reset()

    @staticmethod
    def fits(sp) -> bool:
        """Whether the unit-by-unit ids equal sentencepiece's for this model (see the module)."""
        if model_type(sp.serialized_model_proto()) != _BPE:
            return False
        if not hasattr(sp, "normalize") or sp.normalize(_PROBE) != _ESCAPE + _PROBE.replace(" ", _ESCAPE):
            return False
        crossing = re.compile(f"[^{_ESCAPE}]{_ESCAPE}")
        for i in range(sp.get_piece_size()):
            piece = sp.id_to_piece(i)
            if crossing.search(piece) or ("\n" in piece and piece != "\n"):
                return False
        return True

    def _reset(self) -> None:
        self.index: dict = {}
        self.tokens = np.zeros(0, np.int32)
        self.starts = np.zeros(0, np.int64)
        self.lens = np.zeros(0, np.int64)

    def _add(self, units: List[str]) -> None:
        """Encode units not seen yet (in context: after a newline, whose ids are dropped)."""
        flat, lens = _flatten(self.sp.encode(["\n" + u for u in units], num_threads=1), self.skip)
        base = len(self.index)
        self.index.update(zip(units, range(base, base + len(units))))
        self.starts = np.concatenate([self.starts, len(self.tokens) + np.cumsum(lens) - lens])
        self.lens = np.concatenate([self.lens, lens])
        self.tokens = np.concatenate([self.tokens, flat])

    def encode(self, texts: Sequence[str]) -> tuple:
        """(ids of every document one after another, each document's id count)."""
        if len(self.index) > MAX_UNITS or len(self.tokens) > MAX_TOKENS:
            self._reset()
        # a document holding the escape character itself is one unit: sentencepiece reads that
        # character as a space, which can join it to the space beside it ("a\u2581 b": ▁a ▁▁ b)
        per_doc = [[] if not t else _UNIT.findall(" " + t) if _ESCAPE not in t else [" " + t] for t in texts]
        units = list(itertools.chain.from_iterable(per_doc))
        index = self.index
        uid = np.fromiter(map(index.get, units, itertools.repeat(-1)), np.int64, count=len(units))
        missing = np.flatnonzero(uid < 0)
        if len(missing):        # (a warm cache misses few: only those are looked at again)
            at = missing.tolist()
            self._add(list(dict.fromkeys(units[i] for i in at)))
            uid[missing] = np.fromiter((index[units[i]] for i in at), np.int64, count=len(at))
        lens = self.lens[uid]
        ends = np.cumsum(lens)
        # each unit's ids: positions starts[u] .. starts[u] + lens[u] - 1 of the flat array
        total = int(ends[-1]) if len(ends) else 0
        flat = self.tokens[np.repeat(self.starts[uid] - ends + lens, lens) + np.arange(total)]
        bounds = np.cumsum([0] + [len(u) for u in per_doc])
        upto = np.concatenate([[0], ends])
        return flat, upto[bounds[1:]] - upto[bounds[:-1]]


def _flatten(ids: List[List[int]], skip: int = 0) -> tuple:
    """sentencepiece's ids of several texts, each less its first `skip`, as (one int32 array,
    each text's count)."""
    lens = np.fromiter((len(x) - skip for x in ids), np.int64, count=len(ids))
    flat = np.fromiter(itertools.chain.from_iterable(x[skip:] for x in ids), np.int32, count=int(lens.sum()))
    return flat, lens


def model_type(proto: bytes) -> int:
    """TrainerSpec.model_type of a serialized sentencepiece ModelProto (its field 2, field 3 in
    that; unigram, 1, when not written), read from the protobuf wire format directly: the
    generated module sentencepiece ships needs a protobuf runtime of its own exact version."""
    spec = _field(proto, 2)
    value = _field(spec, 3) if spec is not None else None
    return 1 if value is None else value


def _field(data: bytes, number: int):
    """The last value of a field in a protobuf message: an int (varint) or bytes (length-delimited)."""
    found, i = None, 0
    while i < len(data):
        key, i = _varint(data, i)
        kind = key & 7
        if kind == 0:
            value, i = _varint(data, i)
        elif kind == 2:
            size, i = _varint(data, i)
            value, i = data[i:i + size], i + size
        elif kind in (1, 5):
            value, i = None, i + (8 if kind == 1 else 4)
        else:
            raise ValueError(f"protobuf wire type {kind} at byte {i}")
        if key >> 3 == number:
            found = value
    return found


def _varint(data: bytes, i: int) -> tuple:
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def encode_texts(sp, texts: Sequence[str], eod_id: int, words: Optional[WordCache] = None) -> Docs:
    """Documents as one int32 stream, each followed by EOD. One thread: data.workers processes are
    the parallelism (sentencepiece's own pool would otherwise run on every core in each of them).
    words: the model's WordCache (fits() true) to encode by units; None: sentencepiece per document."""
    texts = list(texts)
    flat, lens = words.encode(texts) if words is not None else _flatten(sp.encode(texts, num_threads=1))
    tokens = np.insert(flat, np.cumsum(lens), eod_id).astype(np.int32)
    return Docs(tokens, (lens + 1).astype(np.int32))


def _select(docs: Docs, keep: np.ndarray) -> Docs:
    return Docs(docs.tokens[np.repeat(keep, docs.lens)], docs.lens[keep])
