"""Clean stage: normalise a document, then keep it or name the filter that drops it.

The length and symbol filters weigh a letter of Chinese or Japanese (a Han character or a kana,
WIDE_RANGES) as WIDE characters: one carries about as much as three Latin letters (with a 16k BPE
vocabulary trained on both languages, ~1.5 Chinese characters make a token against ~4.4 English
ones; three UTF-8 bytes against one). So data.clean.min_chars=32 asks a Chinese text for ~11
letters, a sentence, as it asks an English one for ~6 words (by plain characters it asked for two
or three sentences, and dropped 46% of single-sentence Chinese chat messages against 10% of
English ones). And Chinese punctuation (a mark every ~8 characters: ，。、“”《》 end or frame
clauses of a few characters) scores as English punctuation does, ~0.05 of the weighted characters,
not as markup debris: by plain characters Chinese prose scored 0.12-0.17, twice English's, and a
dialogue or a reading list (“好吧！”, 《红楼梦》《西游记》...) went over the default 0.3, where the same
text in English scores 0.07-0.23. A text without such a letter (English, code, other scripts) is
judged exactly as before the weight existed; a text with one that the plain rule kept is kept.

Characters are counted by a table made from the patterns themselves (so it counts exactly what the
patterns match): an ASCII text by bytes.translate, any other by the flags of each BMP code point
taken over its UTF-32 code units and counted by bytes.count, not a regex match per character (which
made Chinese ~5x dearer per character than English).
"""
import functools
import re
import unicodedata
from collections import Counter
from typing import NamedTuple, Optional, Tuple

import numpy as np

# C0/C1 control characters except tab and newline, plus the byte-order mark and the
# replacement character (what a lossy decoder left behind).
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufeff\ufffd]")
_TRAILING_SPACE = re.compile(r"[ \t]+\n")
_BLANK_RUNS = re.compile(r"\n{3,}")
_SYMBOL = re.compile(r"[^\w\s]")
_SPACE = re.compile(r"\s")
WIDE = 3
WIDE_RANGES = (            # letters (\w) here weigh WIDE characters; punctuation and symbols here weigh one
    (0x3005, 0x3007),      # ideographic iteration mark, closing mark, number zero
    (0x3021, 0x3029),      # Hangzhou numerals
    (0x3031, 0x3035),      # vertical kana repeat marks
    (0x3038, 0x303C),
    (0x3040, 0x30FF),      # Hiragana, Katakana
    (0x31F0, 0x31FF),      # Katakana phonetic extensions
    (0x3400, 0x4DBF),      # CJK Unified Ideographs Extension A
    (0x4E00, 0x9FFF),      # CJK Unified Ideographs
    (0xF900, 0xFAFF),      # CJK Compatibility Ideographs
    (0xFF66, 0xFF9F),      # halfwidth Katakana
    (0x20000, 0x323AF),    # CJK Unified Ideographs Extensions B-H, compatibility supplement
)
_WIDE = re.compile("[" + "".join(f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in WIDE_RANGES) + "]")
# The same classes over ASCII, as bytes to delete: an ASCII document is counted by bytes.translate.
_ASCII = [chr(c) for c in range(128)]
_ASCII_SPACE = "".join(c for c in _ASCII if _SPACE.match(c)).encode()
_ASCII_WORD_OR_SPACE = "".join(c for c in _ASCII if not _SYMBOL.match(c)).encode()
_ASCII_CONTROL = "".join(c for c in _ASCII if _CONTROL.match(c)).encode()
# Per code point of the BMP, what it is to the filters, as flags: one take() over a text's code
# points gives a byte per character, whose values bytes.count() counts (in C, ~1 ns a character).
# A code point above U+FFFF takes the table's last entry, _ASTRAL_F (take's mode="clip"), and is
# looked up by the patterns (few: emoji, rare Han; a table of all 1.1M cost ~0.15 CPU-s a process).
_SPACE_F, _SYMBOL_F, _WIDE_F, _CONTROL_F, _ASTRAL_F = 1, 2, 4, 8, 16
_TABLE: Optional[np.ndarray] = None     # built on first use (~15 ms)
_VALUES = (_SPACE_F, _SYMBOL_F, _WIDE_F, _SPACE_F | _CONTROL_F, _SYMBOL_F | _CONTROL_F)


class Counts(NamedTuple):
    """What the filters count in a text: its characters that are not spaces, symbols (neither
    letter, digit, '_' nor space), wide letters, control characters (_CONTROL)."""
    visible: int
    symbols: int
    wide: int
    control: int

    @property
    def weighted(self) -> int:
        """The visible characters, a wide letter counting WIDE."""
        return self.visible + (WIDE - 1) * self.wide


def _flags(c: str) -> int:
    """One character's flags, from the patterns."""
    space, symbol = _SPACE.match(c) is not None, _SYMBOL.match(c) is not None
    wide = _WIDE.match(c) is not None and not (space or symbol)
    return (_SPACE_F * space | _SYMBOL_F * symbol | _WIDE_F * wide
            | _CONTROL_F * (_CONTROL.match(c) is not None))


@functools.lru_cache(maxsize=None)
def _astral_flags(cp: int) -> int:
    return _flags(chr(cp))


def _table() -> np.ndarray:
    """The flags of every BMP code point, by each pattern's runs over all of them at once."""
    global _TABLE
    if _TABLE is None:
        every = np.arange(0x10000, dtype=np.uint32).tobytes().decode("utf-32-le", "surrogatepass")
        table = np.zeros(0x10001, np.uint8)
        patterns = ((_SPACE_F, _SPACE), (_SYMBOL_F, _SYMBOL), (_WIDE_F, _WIDE), (_CONTROL_F, _CONTROL))
        for flag, pattern in patterns:
            for m in re.finditer(f"(?:{pattern.pattern})+", every):
                table[m.start():m.end()] |= flag
        # a wide letter is a letter: the symbols of the wide ranges (・, unassigned points) are not
        table[(table & (_SPACE_F | _SYMBOL_F)) != 0] &= ~np.uint8(_WIDE_F)
        table[0x10000] = _ASTRAL_F
        _TABLE = table
    return _TABLE


def counts(text: str) -> Counts:
    """The text's Counts, exactly as the patterns would count them."""
    if text.isascii():      # (a flag of the string: free)
        data = text.encode()
        spaces = len(data) - len(data.translate(None, _ASCII_SPACE))
        return Counts(len(data) - spaces, len(data.translate(None, _ASCII_WORD_OR_SPACE)), 0,
                      len(data) - len(data.translate(None, _ASCII_CONTROL)))
    cps = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32)
    flags = _table().take(cps, mode="clip").tobytes()
    # the values a character's flags can take: each of the first three alone, or a control character
    # that is a space (\x1c-\x1f, \x85) or a symbol
    found = list(map(flags.count, _VALUES))
    if flags.count(_ASTRAL_F):
        astral = Counter(map(_astral_flags, cps[cps > 0xFFFF].tolist()))
        found = [n + astral[value] for n, value in zip(found, _VALUES)]
    space, symbol, wide, control_space, control_symbol = found
    control = control_space + control_symbol
    return Counts(len(text) - space - control_space, symbol + control_symbol, wide, control)


class Cleaner:
    def __init__(self, cfg) -> None:
        self.form = None if cfg.normalize == "none" else cfg.normalize
        self.min_chars = cfg.min_chars
        self.max_symbol_ratio = cfg.max_symbol_ratio
        self.max_repeated = cfg.max_repeated_line_fraction

    def normalise(self, text: str) -> str:
        return self._normalised(text)[0]

    def _normalised(self, text: str) -> Tuple[str, Counts]:
        """The normalised text and its Counts (what is fixed after counting removes only spaces,
        which leaves the counts as they were)."""
        if self.form:
            text = unicodedata.normalize(self.form, text)
        text = text.replace("\r\n", "\n").replace("\r", "\n")
        found = counts(text)
        if found.control:
            text = _CONTROL.sub("", text)
            found = counts(text)
        if " \n" in text or "\t\n" in text:     # (the scans below are slow; most texts need neither)
            text = _TRAILING_SPACE.sub("\n", text)
        if "\n\n\n" in text:
            text = _BLANK_RUNS.sub("\n\n", text)
        return text.strip(), found

    def __call__(self, text: str) -> Tuple[str, Optional[str]]:
        """(cleaned text, None) to keep it, or (text, reason) to drop it."""
        text, found = self._normalised(text)
        if len(text) + (WIDE - 1) * found.wide < self.min_chars:
            return text, "too_short"
        if _ratio(found) > self.max_symbol_ratio:
            return text, "symbol_ratio"
        if repeated_line_fraction(text) > self.max_repeated:
            return text, "repeated_lines"
        return text, None


def symbol_ratio(text: str) -> float:
    """Share of non-space characters that are neither letters, digits nor '_', a wide letter
    counting WIDE (markup debris, tables of punctuation, encoded blobs score high; prose and code,
    in any script, score low)."""
    return _ratio(counts(text))


def _ratio(found: Counts) -> float:
    return found.symbols / found.weighted if found.weighted else 1.0


def repeated_line_fraction(text: str) -> float:
    """Share of non-blank lines that repeat an earlier line of the same document (Gopher's
    duplicate-line filter: boilerplate, scraped menus, generated junk)."""
    lines = list(filter(None, map(str.strip, text.split("\n"))))   # (each line stripped once, in C)
    return (len(lines) - len(set(lines))) / len(lines) if lines else 0.0
