"""Clean stage: normalise a document, then keep it or name the filter that drops it."""
import re
import unicodedata
from typing import Optional, Tuple

# C0/C1 control characters except tab and newline, plus the byte-order mark and the
# replacement character (what a lossy decoder left behind).
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufeff\ufffd]")
_TRAILING_SPACE = re.compile(r"[ \t]+\n")
_BLANK_RUNS = re.compile(r"\n{3,}")
_SYMBOL = re.compile(r"[^\w\s]")
_SPACE = re.compile(r"\s")
# The same two classes over ASCII, as bytes to delete (taken from the patterns themselves, so the
# fast path below counts exactly what they match): an ASCII document is counted by bytes.translate.
_ASCII = [chr(c) for c in range(128)]
_ASCII_BYTES = bytes(range(128))
_ASCII_SPACE = "".join(c for c in _ASCII if _SPACE.match(c)).encode()
_ASCII_WORD_OR_SPACE = "".join(c for c in _ASCII if not _SYMBOL.match(c)).encode()
_ASCII_CONTROL = "".join(c for c in _ASCII if _CONTROL.match(c)).encode()


class Cleaner:
    def __init__(self, cfg) -> None:
        self.form = None if cfg.normalize == "none" else cfg.normalize
        self.min_chars = cfg.min_chars
        self.max_symbol_ratio = cfg.max_symbol_ratio
        self.max_repeated = cfg.max_repeated_line_fraction

    def normalise(self, text: str) -> str:
        if self.form:
            text = unicodedata.normalize(self.form, text)
        text = text.replace("\r\n", "\n").replace("\r", "\n")
        if _has_control(text):   # (a regex scan of every text cost more than these checks)
            text = _CONTROL.sub("", text)
        if " \n" in text or "\t\n" in text:     # (the scans below are slow; most texts need neither)
            text = _TRAILING_SPACE.sub("\n", text)
        if "\n\n\n" in text:
            text = _BLANK_RUNS.sub("\n\n", text)
        return text.strip()

    def __call__(self, text: str) -> Tuple[str, Optional[str]]:
        """(cleaned text, None) to keep it, or (text, reason) to drop it."""
        text = self.normalise(text)
        if len(text) < self.min_chars:
            return text, "too_short"
        if symbol_ratio(text) > self.max_symbol_ratio:
            return text, "symbol_ratio"
        if repeated_line_fraction(text) > self.max_repeated:
            return text, "repeated_lines"
        return text, None


def symbol_ratio(text: str) -> float:
    """Share of non-space characters that are neither letters, digits nor '_' (markup debris,
    tables of punctuation, encoded blobs score high; prose and code score low)."""
    # The ASCII characters counted by bytes.translate, the (few) others by the patterns themselves:
    # the patterns over the whole text cost 5x more (a match object per space and per symbol).
    data = text.encode("ascii", "ignore")
    visible = len(data.translate(None, _ASCII_SPACE))
    symbols = len(data.translate(None, _ASCII_WORD_OR_SPACE))
    if len(data) < len(text):
        rest = non_ascii(text)
        visible += len(rest) - len(_SPACE.findall(rest))
        symbols += len(_SYMBOL.findall(rest))
    return symbols / visible if visible else 1.0


def repeated_line_fraction(text: str) -> float:
    """Share of non-blank lines that repeat an earlier line of the same document (Gopher's
    duplicate-line filter: boilerplate, scraped menus, generated junk)."""
    lines = list(filter(None, map(str.strip, text.split("\n"))))   # (each line stripped once, in C)
    return (len(lines) - len(set(lines))) / len(lines) if lines else 0.0


def non_ascii(text: str) -> str:
    """The text's characters above U+007F, in order: its UTF-8 less the ASCII bytes (every byte of a
    longer character is >= 0x80), decoded again."""
    data = text.encode("utf-8", "surrogatepass")
    return data.translate(None, _ASCII_BYTES).decode("utf-8", "surrogatepass")


def _has_control(text: str) -> bool:
    """Whether _CONTROL would remove anything: byte deletion over the ASCII part, the regex only over
    the characters above U+007F (none in most texts)."""
    data = text.encode("ascii", "ignore")
    if len(data.translate(None, _ASCII_CONTROL)) != len(data):
        return True
    return len(data) < len(text) and _CONTROL.search(non_ascii(text)) is not None
