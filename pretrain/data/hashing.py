"""Stable hashes: cache keys, file checksums, document identity and the held-out split.

Python's hash() is salted per process, so everything here goes through hashlib.
"""
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import numpy as np

_WORDS = re.compile(r"\w+")
_WORD = re.compile(r"\w")
_ASCII = bytes(range(128))
# Every byte but the ASCII \w characters made a space: a text whose characters above U+007F are
# all non-word characters (curly quotes, dashes, most prose's only ones) is split into its words by
# bytes.translate and bytes.split, in C, at a third of the regex's cost.
_SPACE_NON_WORD = bytes(c if c < 128 and _WORDS.match(chr(c)) else 32 for c in range(256))
_IS_WORD: dict = {}         # character above U+007F -> whether \w matches it
# Scripts written without spaces between words. A run of their characters is one \w+ "word" up
# to the next punctuation mark, so a word shingle of it would span clauses: near dedup takes each
# of their characters as a unit of its own (character n-grams, as NeMo Curator and Data-Juicer do
# for Chinese), and the words of every other script as units (word n-grams), both in one document.
UNSPACED = (
    (0x0E00, 0x0EFF),      # Thai, Lao
    (0x1000, 0x109F),      # Myanmar
    (0x1780, 0x17FF),      # Khmer
    (0x2E80, 0x2FDF),      # CJK and Kangxi radicals
    (0x3005, 0x3007),      # ideographic iteration mark, closing mark, number zero
    (0x3021, 0x3029),      # Hangzhou numerals
    (0x3031, 0x3035),      # vertical kana repeat marks
    (0x3038, 0x303C),
    (0x3040, 0x30FF),      # Hiragana, Katakana
    (0x3100, 0x312F),      # Bopomofo
    (0x31A0, 0x31BF),      # Bopomofo extended
    (0x31F0, 0x31FF),      # Katakana phonetic extensions
    (0x3400, 0x4DBF),      # CJK Unified Ideographs Extension A
    (0x4E00, 0x9FFF),      # CJK Unified Ideographs
    (0xA000, 0xA4CF),      # Yi
    (0xF900, 0xFAFF),      # CJK Compatibility Ideographs
    (0xFF66, 0xFF9F),      # halfwidth Katakana
    (0x20000, 0x323AF),    # CJK Unified Ideographs Extensions B-H, compatibility supplement
)
_UNSPACED_CLASS = "".join(f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in UNSPACED)
_UNIT = re.compile(f"[{_UNSPACED_CLASS}]|[^ {_UNSPACED_CLASS}]+")
_UNSPACED_BOUNDS = np.asarray([x for lo, hi in UNSPACED for x in (lo, hi + 1)], np.int64)


def digest(obj: Any) -> str:
    """sha256 of a JSON-serialisable value, independent of dict order."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()


def file_sha256(path: Path, block: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(block):
            h.update(chunk)
    return h.hexdigest()


def content_fingerprint(files) -> list:
    """Identity of input files for a cache key: each one's path and the sha256 of its bytes. Not
    size + mtime: an edit that keeps the size, with its mtime set back, would reuse stale data.
    (Reading is the cost: about 1 s per GB here, once per call, against minutes to prepare it.)"""
    out = []
    dirs: dict = {}     # each directory resolved once (50,000 small files: ~7 s of resolve() saved)
    for f in map(Path, files):
        try:
            if f.is_symlink():
                path = f.resolve()
            else:
                parent = dirs.get(f.parent) or dirs.setdefault(f.parent, f.parent.resolve())
                path = parent / f.name
            out.append([str(path), file_sha256(f)])
        except OSError:
            out.append([str(f), None])       # unreadable now; it will be counted as such
    return out


def dedup_words(text: str) -> list:
    """Lower-cased words: the view of a document that exact and near dedup compare."""
    return _WORDS.findall(text.lower())


def unit_spans(joined: str) -> list:
    """The [start, end) of each shingle unit in " ".join(dedup_words(text)) (the definition that
    Words' starts/ends compute faster): a character of an unspaced script alone, else a word or the
    part of a word between such characters."""
    return [m.span() for m in _UNIT.finditer(joined)]


def joined_words(text: str) -> bytes:
    """" ".join(dedup_words(text)) as UTF-8: by byte translation unless a character above U+007F
    is a word character (then by the regex)."""
    low = text.lower()
    data = low.encode("utf-8", "surrogatepass")
    if len(data) != len(low):
        rest = data.translate(None, _ASCII).decode("utf-8", "surrogatepass")
        # Chinese: a word character comes first, found at once; English prose: a few quotes and dashes
        if _WORD.search(rest) if len(rest) > 64 else any(map(_is_word, rest)):
            return " ".join(_WORDS.findall(low)).encode("utf-8", "surrogatepass")
    return b" ".join(data.translate(_SPACE_NON_WORD).split())


def _is_word(ch: str) -> bool:
    word = _IS_WORD.get(ch)
    if word is None:
        word = _IS_WORD[ch] = _WORDS.match(ch) is not None
    return word


class Words:
    """A document's dedup_words as the UTF-8 bytes of " ".join(words), and each shingle unit's
    [start, end) in them (unit_spans, in bytes): the exact digest reads the bytes, the MinHash
    shingles the units (built by dedup_view here, or by the compiled fasthash.views_of, byte for byte
    the same). A shingle is n consecutive units, the bytes from the first's start to the last's end."""
    __slots__ = ("joined", "starts", "ends")

    def __init__(self, joined: bytes, starts: np.ndarray, ends: np.ndarray) -> None:
        self.joined, self.starts, self.ends = joined, starts, ends

    def __len__(self) -> int:
        return len(self.starts)


def dedup_view(text_or_words) -> Words:
    """The Words of a text (or of its dedup_words list)."""
    if isinstance(text_or_words, str):
        joined = joined_words(text_or_words)
    else:
        joined = " ".join(text_or_words).encode()
    if not joined:
        return Words(joined, np.zeros(0, np.int64), np.zeros(0, np.int64))
    if not joined.isascii():
        return Words(joined, *_unit_bounds(joined))
    spaces = np.flatnonzero(np.frombuffer(joined, np.uint8) == 32)     # words hold no space
    return Words(joined, np.concatenate([[0], spaces + 1]).astype(np.int64),
                 np.concatenate([spaces, [len(joined)]]).astype(np.int64))


def _unit_bounds(joined: bytes) -> tuple:
    """unit_spans in bytes of UTF-8 text, by array operations over its characters: each character's
    code point from its bytes, whether it is a space or of an unspaced script, and from those where
    units start and end."""
    b = np.frombuffer(joined, np.uint8)
    lead = np.flatnonzero((b & 0xC0) != 0x80)          # the first byte of each character
    stop = np.append(lead[1:], len(b))
    width = stop - lead
    pad = np.concatenate([b, np.zeros(3, np.uint8)]).astype(np.int64)
    b0, b1, b2, b3 = (pad[lead + k] for k in range(4))
    cp = np.select([width == 1, width == 2, width == 3],
                   [b0, (b0 & 0x1F) << 6 | b1 & 0x3F, (b0 & 0x0F) << 12 | (b1 & 0x3F) << 6 | b2 & 0x3F],
                   (b0 & 0x07) << 18 | (b1 & 0x3F) << 12 | (b2 & 0x3F) << 6 | b3 & 0x3F)
    space = cp == 32
    alone = np.searchsorted(_UNSPACED_BOUNDS, cp, side="right") % 2 == 1
    before = np.concatenate([[True], space[:-1] | alone[:-1]])     # a unit ends before this character
    after = np.concatenate([space[1:] | alone[1:], [True]])        # ... or after it
    return lead[~space & (before | alone)], stop[~space & (after | alone)]


def words_digest(words) -> bytes:
    """Identity of a document up to case, punctuation and whitespace (from its dedup_words, or their
    " ".join as UTF-8 bytes: fasthash.Words.joined)."""
    joined = words if isinstance(words, bytes) else " ".join(words).encode()
    return hashlib.blake2b(joined, digest_size=16).digest()


def piece_key(text: str) -> bytes:
    """The held-out split key shared by all pieces of a document split for length."""
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


def stable_int(key: Any, bits: int = 32) -> int:
    """A small non-negative integer from any string/bytes (seeds, tags)."""
    data = key if isinstance(key, bytes) else str(key).encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") >> (64 - bits)


def is_validation(key: bytes, fraction: float) -> bool:
    """Held-out membership from the document's identity alone, so it never changes between runs
    and a document (or its exact duplicate) can never be in both splits."""
    if fraction <= 0.0:
        return False
    u = int.from_bytes(hashlib.blake2b(b"val:" + key, digest_size=8).digest(), "little") / 2.0 ** 64
    return u < fraction
