"""How a corpus file's bytes become text, decided per file from its first 64 KiB (the head):

1. A byte order mark decides: UTF-8, UTF-16 LE/BE, UTF-32 LE/BE (what Windows tools and editors
   write). UTF-16 without one (a NUL byte in every second place) is not UTF-8, see 4.
2. A head that is UTF-8 is UTF-8 (pure ASCII is UTF-8 and every legacy encoding alike).
3. A head with a few broken bytes in otherwise UTF-8 text (valid multibyte characters around them,
   or a handful of bytes on a few lines) is UTF-8 with stray bytes: the reader drops the line that
   holds each one, names the file and byte offset, and keeps the rest.
4. Anything else is not UTF-8: read in the source's `encoding` when it names one (the encoding of
   that source's files that are not UTF-8, so a source mixing UTF-8 and GB18030 files reads both);
   else refused with one line naming the file, what it looks like, and the key.

What it looks like is charset_normalizer's guess, used only as advice in that line: the decoding
itself never depends on a detector (its guesses on single-byte text are often wrong, e.g.
mac_latin2 for French cp1252), so the same inputs and config give the same bytes whatever version
is installed. Bytes a decoding cannot map become marks, one lone surrogate U+DC00+byte per byte
(never produced by a strict decode), so the reader finds them and their offsets afterwards.
"""
import codecs
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Dict, List, Optional, Tuple

from pretrain.config.errors import PretrainDataError

# lazy imports (charset_normalizer): optional; without it the refusal only lacks its guess

MARK = "pretrain-mark"                    # the error handler that turns undecodable bytes into marks
_MARKS = re.compile("[\udc00-\udcff]")
_NON_ASCII = re.compile("[^\x00-\x7f]")
SPAN_MAX = 1 << 10        # chars kept around a bad byte when its line is longer (a file of one long line)

# Longest first: a UTF-32 LE mark starts like a UTF-16 LE one.
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be"), (codecs.BOM_UTF8, "utf-8"),
         (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))
# Without a byte order mark these name little-endian, as Windows writes them (and Python's own
# "utf-16" decoder would add a mark when a length is computed by encoding).
_NO_BOM = {"utf-16": "utf-16-le", "utf-32": "utf-32-le"}


def _mark(err: UnicodeError):
    if isinstance(err, UnicodeDecodeError):
        return "".join(chr(0xDC00 + b) for b in err.object[err.start:err.end]), err.end
    raise err


codecs.register_error(MARK, _mark)


@dataclass(frozen=True)
class Decoding:
    """How one source's files are decoded: its name (for the key a message names) and its
    data.sources.<name>.encoding (None: files must be UTF-8 or carry a byte order mark)."""
    source: str = ""
    fallback: Optional[str] = None

    @property
    def key(self) -> str:
        return f"data.sources.{self.source or '<name>'}.encoding"


@dataclass(frozen=True)
class Charset:
    codec: str        # a Python codec name
    bom: int = 0      # bytes of the byte order mark the text starts after

    @property
    def reason(self) -> str:
        """The drop reason of a line this charset cannot decode: invalid_utf8, invalid_gb18030, ..."""
        return "invalid_" + self.codec.replace("-", "").replace("_", "")

    @property
    def byte_lines(self) -> bool:
        """Whether a line ends at a b"\\n" byte (ASCII-compatible), so lines split before decoding
        (and a large .jsonl file splits into byte ranges); else text is split after (UTF-16/32)."""
        return _byte_lines(self.codec)


UTF8 = Charset("utf-8")


@lru_cache(maxsize=None)
def _byte_lines(codec: str) -> bool:
    return "\n{}\"".encode(codec) == b"\n{}\""


def fallback_charset(decoding: Decoding) -> Optional[Charset]:
    if decoding.fallback is None:
        return None
    name = codecs.lookup(decoding.fallback).name
    return Charset(_NO_BOM.get(name, name))


def of_head(path, head: bytes, decoding: Decoding, cut: bool = True) -> Optional[Charset]:
    """The charset to read the file `path` with, from its head (the first bytes; cut: the file goes
    on past them); None for a file that is not text at all (read as one `binary` drop). Raises
    PretrainDataError for a file that is not UTF-8 and not in the source's encoding."""
    for bom, codec in _BOMS:
        if head.startswith(bom):
            cs = Charset(codec, len(bom))
            return None if looks_binary(head) and cs.byte_lines else cs
    fallback = fallback_charset(decoding)
    if looks_utf16(head):
        if fallback and not fallback.byte_lines:
            return fallback
        endian = "le" if head[1::2].count(0) else "be"
        _refuse(path, decoding, f"utf-16-{endian}", "without a byte order mark")
    if looks_binary(head):
        return None
    if _utf8(head, cut):
        return UTF8
    utf8 = _Damage(head, "utf-8", cut)
    if utf8.in_valid_text() or (not fallback and utf8.few()):
        return UTF8
    if fallback and _Damage(head, fallback.codec, cut).few():
        return fallback
    # Refused only on the detector's positive word: random or corrupted bytes (no encoding fits
    # them) are lines to drop, not a file in another encoding. A single-byte guess fits almost any
    # bytes, so it takes bad bytes on more than one line.
    guess = guess_encoding(head)
    if fallback:
        if guess and guess != fallback.codec:
            _refuse(path, decoding, guess)
        return fallback
    if guess and (not _single_byte(guess) or utf8.bad_lines >= 2):
        _refuse(path, decoding, guess)
    return UTF8


def _utf8(head: bytes, cut: bool) -> bool:
    """Whether the head is UTF-8 (when cut, a character cut off at its end is not an error)."""
    try:
        head.decode("utf-8")
        return True
    except UnicodeDecodeError as err:
        return cut and err.end == len(head) and err.reason == "unexpected end of data"


class _Damage:
    """What decoding a head in `codec` leaves undecodable: bytes, lines, and the valid non-ASCII
    characters around them."""

    def __init__(self, head: bytes, codec: str, cut: bool) -> None:
        text = codecs.getincrementaldecoder(codec)(MARK).decode(head, final=not cut)
        self.bad = len(_MARKS.findall(text))
        self.lines = text.count("\n") + 1
        self.bad_lines = sum(1 for line in text.split("\n") if _MARKS.search(line))
        self.valid = len(_NON_ASCII.findall(text)) - self.bad

    def in_valid_text(self) -> bool:
        """Valid multibyte characters all around the bad bytes: text with a few broken ones. Legacy
        CJK encodings form a valid UTF-8 sequence by chance for ~1 character in 7, single-byte
        ones almost never."""
        return self.valid >= 4 * self.bad

    def few(self) -> bool:
        """A handful of bad bytes on a few lines (a stray byte, a line cut in the middle)."""
        return self.bad <= 8 * self.bad_lines and self.bad_lines <= max(2, self.lines // 20)


def looks_binary(block: bytes) -> bool:
    """Whether the start of a file says it is not text at all (an image, an archive, compressed
    bytes under a text name): NUL bytes, and many of them or mostly undecodable bytes. One NUL
    or one badly encoded line in a text file is that document's problem, decided per document."""
    nul = block.count(0)
    if not nul:
        return False
    if nul > max(1, len(block) // 100):
        return True
    text = block.decode("utf-8", errors="replace")
    return text.count("\ufffd") > len(text) // 10


def looks_utf16(head: bytes) -> bool:
    """UTF-16 without a byte order mark, as text in the Latin range writes it: a NUL byte in
    almost every second place (one parity), almost none in the other."""
    n = len(head) // 2
    if n < 8 or 0 not in head:
        return False
    even, odd = head[0::2].count(0), head[1::2].count(0)
    return max(even, odd) >= 0.4 * n and min(even, odd) <= 0.01 * n


def _single_byte(codec: str) -> bool:
    """A table of 256 characters (cp1252, latin-1, mac_*): guesses among these are unreliable."""
    try:
        name = codecs.lookup(codec).name
    except LookupError:
        return True
    return len(bytes(range(0x80, 0x100)).decode(name, "replace")) == 0x80


def guess_encoding(head: bytes) -> Optional[str]:
    """What the head looks like, as a codec name the `encoding` key takes; None when unknown.
    Among single-byte candidates cp1252 (Western European, a superset of latin-1's printable
    characters) is named when it fits at all: the detector's first pick there is often a rarer one."""
    try:
        from charset_normalizer import from_bytes
    except ImportError:       # advice only: the refusal still names the file and the key
        return None
    found = from_bytes(head)
    best = found.best()
    if best is None:
        return None
    name = codecs.lookup(best.encoding).name
    if name in ("gb2312", "gbk"):
        return "gb18030"      # its superset: every GBK file decodes the same, and rarer characters too
    if _single_byte(name) and "cp1252" in {codecs.lookup(m.encoding).name for m in found}:
        return "cp1252"
    return _NO_BOM.get(name, name)


def _refuse(path, decoding: Decoding, guess: str, how: str = ""):
    looks = f"it looks like {guess}{' ' + how if how else ''}"
    if decoding.fallback:
        raise PretrainDataError(f"{path} is neither UTF-8 nor {decoding.key}={decoding.fallback} ({looks}); "
                                f"give the files in {guess} a source of their own with encoding={guess}, or "
                                f"convert them to UTF-8")
    raise PretrainDataError(f"{path} is not UTF-8 ({looks}); set {decoding.key}={guess} (the encoding of the "
                            f"source's files that are not UTF-8), or convert the file to UTF-8")


# ---------------------------------------------------------------- decoding and finding bad bytes

def decoder(cs: Charset):
    """An incremental decoder: strict for UTF-8 (the common case pays for no scan; a block that
    fails is decoded again with marks, see decode_block), with marks for the rest."""
    return codecs.getincrementaldecoder(cs.codec)("strict" if cs.codec == "utf-8" else MARK)


def decode_block(dec, block: bytes, final: bool) -> Tuple[str, int]:
    """The text of `block` and the index of its first mark (-1: none)."""
    if dec.errors == "strict":
        try:
            return dec.decode(block, final), -1
        except UnicodeDecodeError:          # the decoder's state is as before the call: decode again
            dec.errors = MARK
            try:
                text = dec.decode(block, final)
            finally:
                dec.errors = "strict"
    else:
        text = dec.decode(block, final)
    found = _MARKS.search(text)
    return text, found.start() if found else -1


def first_mark(text: str, start: int = 0) -> int:
    found = _MARKS.search(text, start)
    return found.start() if found else -1


def byte_len(text: str, cs: Charset) -> int:
    """Bytes of `text` in the file (a mark stands for one byte)."""
    marks = len(_MARKS.findall(text))
    return len((_MARKS.sub("", text) if marks else text).encode(cs.codec)) + marks


def bad_offset(line, cs: Charset) -> int:
    """Offset of the first undecodable byte in a line (bytes, or text with marks)."""
    text = line.decode(cs.codec, MARK) if isinstance(line, bytes) else line
    return byte_len(text[:max(0, first_mark(text))], cs)


def bad_span(text: str, at: int, final: bool) -> Optional[Tuple[int, int]]:
    """[start, end) of what to drop around the bad byte at `at`: its line, or where a line runs on
    for more than SPAN_MAX characters, the words within SPAN_MAX on either side. None when the span
    may go on past the end of `text` (more is to be decoded)."""
    lo = max(0, at - SPAN_MAX)
    nl = text.rfind("\n", lo, at)
    if nl >= 0 or lo == 0:
        start = nl + 1
    else:
        space = text.find(" ", lo, at)
        start = space + 1 if space >= 0 else lo
    hi = at + SPAN_MAX
    nl = text.find("\n", at, hi)
    if nl >= 0:
        return start, nl + 1
    if len(text) < hi:
        return (start, len(text)) if final else None
    space = text.rfind(" ", at, hi)
    return start, space + 1 if space >= 0 else hi


# ---------------------------------------------------------------- where bytes were dropped

class Undecodable:
    """Per file, where undecodable bytes were dropped: the first offset and how many lines."""

    def __init__(self) -> None:
        self.files: Dict[str, list] = {}

    def add(self, where: Tuple[str, int], reason: str) -> None:
        entry = self.files.setdefault(where[0], [where[0], where[1], 0, reason])
        entry[2] += 1

    def record(self) -> List[list]:
        return list(self.files.values())


NOTED_FILES = 100      # files a manifest lists by name (the rest counted)


def summary(records: List[List[list]]) -> Dict:
    """The manifest's account of files with undecodable bytes, from the read tasks' records in
    task order (a large file read in byte ranges is in several: one entry, its first offset)."""
    files: Dict[str, Dict] = {}
    for rec in records:
        for name, at, n, reason in rec:
            entry = files.setdefault(name, {"file": name, "first_byte": at, "lines_dropped": 0,
                                            "reason": reason})
            entry["lines_dropped"] += n
    listed = list(files.values())
    return {"files": len(listed), "lines_dropped": sum(f["lines_dropped"] for f in listed),
            "first": listed[:NOTED_FILES]}


def warnings(source: str, account: Dict, shown: int = 5) -> List[str]:
    """The lines that tell a user which files lost lines to undecodable bytes."""
    out = []
    for f in account["first"][:shown]:
        what = "UTF-8" if f["reason"] == "invalid_utf8" else f["reason"][len("invalid_"):]
        gz = " of its decompressed text" if f["file"].endswith((".gz", ".zst")) else ""
        out.append(f"warning: {f['file']}: invalid {what} at byte {f['first_byte']:,}{gz}; dropped "
                   f"{f['lines_dropped']} line(s) holding such bytes, kept the rest (if the file is in "
                   f"another encoding, set data.sources.{source}.encoding)")
    if account["files"] > shown:
        out.append(f"warning: ... and {account['files'] - shown} more file(s) of {source} with undecodable "
                   f"bytes, {account['lines_dropped']} line(s) dropped in all (manifest.json: "
                   f"documents.undecodable)")
    return out
