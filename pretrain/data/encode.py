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

That pays where units repeat: English words do, a line of Chinese (no spaces, so one unit up to
the newline) almost never does, and a unit that misses costs more than encoding its characters
in the document would. So each chunk goes by units or by whole documents, whichever costs less
by its own units (units_of): the same ids either way, and a choice made from the chunk alone
(never the cache's state or the worker it runs on).
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
# What a chunk costs by units, in characters that sentencepiece encodes (units_of): each distinct
# unit's characters once, dearer than in a whole document (after a newline whose ids are dropped,
# then indexed: MISS_COST), and every unit's look-up and gather (UNIT_COST characters' worth);
# whole documents cost their characters. Fitted to both ways' measured CPU time on 512 kB chunks
# of Chinese web prose with 0-100% English documents (16k BPE): the model's ratio was within 0.15 of
# the measured one, and both cross 1 at ~10% English documents.
MISS_COST = 1.25
UNIT_COST = 0.5
# Units this long on average are lines or clauses (Chinese has no spaces between words), which
# repeat only in duplicated documents: such texts go by documents without being split into units
# (the split alone costs ~10% of encoding Chinese). Units this short are words, which repeat: such
# texts go by units without counting what repeats (a set of a chunk's units costs ~10% of encoding
# it by units). Measured means: Chinese 30-60 characters, English prose 6, Python code 8, Chinese
# with 10-50% of its documents English 8-14.
LONG_UNIT = 24
SHORT_UNIT = 10


class WordCache:
    """The ids of each distinct unit, in context (after another unit), for one sentencepiece
    model: one flat id array with each unit's start and length, so a chunk's ids are one
    vectorised gather."""

    def __init__(self, sp) -> None:
        self.sp = sp
        self.skip = len(sp.encode("\n"))   # the dummy prefix and the newline each miss is encoded after
        self._reset()
        self.chunks = {"units": 0, "documents": 0}     # how the chunks went (units_of), for tests

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
        # (as lists: a numpy array for each of thousands of words would cost more than the lists)
        flat, lens = _flatten(self.sp.encode(["\n" + u for u in units], num_threads=1), self.skip)
        base = len(self.index)
        self.index.update(zip(units, range(base, base + len(units))))
        self.starts = np.concatenate([self.starts, len(self.tokens) + np.cumsum(lens) - lens])
        self.lens = np.concatenate([self.lens, lens])
        self.tokens = np.concatenate([self.tokens, flat])

    def encode(self, texts: Sequence[str]) -> tuple:
        """(ids of every document one after another, each document's id count): by units when
        that pays on these texts (units_of), else document by document."""
        split = units_of(texts)
        if split is None:
            self.chunks["documents"] += 1
            return encode_documents(self.sp, texts)
        per_doc, units = split
        self.chunks["units"] += 1
        if len(self.index) > MAX_UNITS or len(self.tokens) > MAX_TOKENS:
            self._reset()
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


def units_of(texts: Sequence[str]) -> Optional[tuple]:
    """(each text's units, all units in order) when encoding these texts by units costs less than
    by whole documents, else None: judged on the texts alone, as if no unit were cached yet. By the
    units' mean length first (LONG_UNIT, SHORT_UNIT), then, between the two, by what they repeat."""
    chars = sum(map(len, texts)) + sum(1 for t in texts if t)      # with the dummy prefix's space
    spaces = sum(map(str.count, texts, itertools.repeat(" ")))
    newlines = sum(map(str.count, texts, itertools.repeat("\n")))
    if chars >= LONG_UNIT * (spaces + newlines + len(texts)):   # a unit holds one of these or starts a text
        return None
    # a document holding the escape character itself is one unit: sentencepiece reads that
    # character as a space, which can join it to the space beside it ("a\u2581 b": ▁a ▁▁ b)
    per_doc = [[] if not t else _UNIT.findall(" " + t) if _ESCAPE not in t else [" " + t] for t in texts]
    units = list(itertools.chain.from_iterable(per_doc))
    if chars < SHORT_UNIT * len(units):
        return per_doc, units
    # each distinct unit's characters encoded once (dearer than in a document), each unit looked up
    pays = MISS_COST * sum(map(len, set(units))) + UNIT_COST * len(units) < chars
    return (per_doc, units) if pays else None


def encode_documents(sp, texts: Sequence[str]) -> tuple:
    """sentencepiece's own ids of each text, as (one int32 array, each text's count): as numpy
    arrays (Python lists of ids cost more: ~5-25% of encoding Chinese, at ~1.5 characters an id)."""
    ids = sp.encode_as_numpy(list(texts), num_threads=1)
    lens = np.fromiter(map(len, ids), np.int64, count=len(ids))
    return (np.concatenate(ids).astype(np.int32, copy=False) if ids else np.zeros(0, np.int32)), lens


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
    flat, lens = words.encode(texts) if words is not None else encode_documents(sp, texts)
    tokens = np.insert(flat, np.cumsum(lens), eod_id).astype(np.int32)
    return Docs(tokens, (lens + 1).astype(np.int32))


def _select(docs: Docs, keep: np.ndarray) -> Docs:
    return Docs(docs.tokens[np.repeat(keep, docs.lens)], docs.lens[keep])
