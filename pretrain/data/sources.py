"""Read stage: find a source's files and stream its documents, one at a time.

Formats: .txt (one document per file), .jsonl (one per line, text under a configurable field),
.parquet (one per row); each optionally .gz or .zst. Nothing is held beyond one document (a
.txt file of any size is decoded block by block and cut into pieces of clean.max_chars).

Bad input never stops the run: each bad file, line or row is yielded as a `Drop` with its reason,
so the manifest can account for every document (in = kept + dropped). What is wrong with one
document (a NUL byte, a lone surrogate from a JSON escape, a badly encoded row) drops that
document only; a whole file is dropped as `binary` only when it is not text at all.

Encodings (pretrain.data.charsets decides per file): UTF-8, a byte order mark's UTF-16/32, or the
source's `encoding` for its files that are not UTF-8; a file that is none of these stops the run
with one line. A stray undecodable byte drops its line (a .jsonl document; in a .txt file the line,
the text before and after it kept as pieces of the document) with the file and byte offset.
"""
import errno
import gzip
import io
import json
import os
import shutil
import stat
import tempfile
import zlib
from contextlib import suppress
from pathlib import Path
from typing import Iterator, List, Optional, Sequence, Tuple, Union

import zstandard

from pretrain.config import paths as config_paths
from pretrain.config.errors import PretrainDataError
from pretrain.data import charsets, sample
from pretrain.data.charsets import Charset, Decoding
from pretrain.data.documents import Doc, Drop, Item
from pretrain.data.hashing import piece_key

# lazy imports (pyarrow): +~250 ms; only a Parquet source loads it

FORMATS = (".txt", ".jsonl", ".parquet")
COMPRESSIONS = ("", ".gz", ".zst")
_SNIFF = 1 << 16          # bytes looked at to tell a binary file from text
_BLOCK = 1 << 20          # read size for streamed .txt files
# strict=False: a raw control character (a NUL, a tab) inside a string is kept for the cleaner to
# remove, rather than losing the document. One decoder: json.loads(strict=False) builds one per line.
_JSON = json.JSONDecoder(strict=False)
# What a broken, truncated or vanished file raises while being read.
_READ_ERRORS = (OSError, EOFError, zlib.error, zstandard.ZstdError)


def file_kind(path: Path) -> Optional[Tuple[str, str]]:
    """(format, compression) from the name, e.g. ('.jsonl', '.zst'); None if not a corpus file."""
    name = path.name.lower()
    for comp in COMPRESSIONS:
        for fmt in FORMATS:
            if name.endswith(fmt + comp):
                return fmt, comp
    return None


def resolve_files(source: str, paths: Sequence[str]) -> List[Path]:
    """Every corpus file named by a source's paths (files, directories, globs: the rule of
    pretrain.config.paths), sorted so the document order (and so the prepared data) does not depend
    on the file system. A file that is not one to read (a FIFO, a mostly sparse file) is refused."""
    key = f"data.sources.{source}.paths"
    hint = "give files, directories or globs of .txt/.jsonl/.parquet, optionally .gz/.zst"
    found: List[Path] = []
    for raw in paths:
        matches = [Path(m) for m in config_paths.matches(raw)]
        if not matches:
            raise PretrainDataError(f"{key}: no such file {raw!r} (cwd {os.getcwd()}; {hint})")
        files: List[Path] = []
        for m in matches:
            if m.is_dir():
                files += _walk(m)
            elif file_kind(m):
                files.append(m)
            elif not config_paths.has_glob(str(raw)):
                raise PretrainDataError(f"{key}: unsupported file type {raw!r} ({hint})")
        if not files:
            raise PretrainDataError(f"{key}: no corpus files under {raw!r} ({hint})")
        found += files
    found = sorted(set(found))
    for f in found:
        why = not_readable(f)
        if why:
            raise PretrainDataError(f"{key}: {f} is {why}; remove it from the corpus, or name the source's "
                                    f"files with a glob that leaves it out")
    return found


def _walk(top: Path) -> List[Path]:
    """The corpus files under a directory, symlinked subdirectories followed (a corpus assembled
    from links is read whole); a directory reached a second time (a link loop, two links to one
    place) is not read again."""
    seen = {os.path.realpath(top)}
    files: List[Path] = []
    for root, dirs, names in os.walk(top, followlinks=True):
        real = [(d, os.path.realpath(os.path.join(root, d))) for d in sorted(dirs)]
        dirs[:] = [d for d, r in real if r not in seen]
        seen.update(r for _, r in real)
        files += [Path(root) / n for n in sorted(names) if file_kind(Path(n))]
    return files


_HOLES_MAX = 1 << 20     # bytes of holes that make a file not text (holes read as NUL bytes)
_EXTENTS_MAX = 4096      # data extents counted before the rest of a file is taken as data


def not_readable(path: Path) -> Optional[str]:
    """Why a corpus file is not one to read, or None: not a regular file (a FIFO blocks until a
    writer comes, a device never ends), or holes of more than a MiB (a sparse file: what its holes
    hold is NUL bytes: a 10 GB one with 100 KB of text gave no output for over 10 minutes). A file that
    cannot be stat'ed is left to the reader, which counts it as unreadable."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        mode = st.st_mode
        kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
                else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a file")
        return f"{kind}, not a regular file: reading it would wait for a writer or never end"
    holes = st.st_size - _data_bytes(path, st) if st.st_blocks * 512 < st.st_size else 0
    if holes > _HOLES_MAX:
        return (f"a sparse file: {st.st_size:,} bytes of which {holes:,} are holes (they read as NUL "
                f"bytes, not text)")
    return None


def _data_bytes(path: Path, st: os.stat_result) -> int:
    """Bytes of `path` in data extents (SEEK_DATA / SEEK_HOLE); its size where the file system
    cannot tell (then it reports no holes), or past _EXTENTS_MAX extents."""
    data, at = 0, 0
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return st.st_size
    try:
        for _ in range(_EXTENTS_MAX):
            try:
                start = os.lseek(fd, at, os.SEEK_DATA)
            except OSError as e:     # ENXIO: no data past `at`; else no SEEK_DATA here
                return data if e.errno == errno.ENXIO else st.st_size
            at = os.lseek(fd, start, os.SEEK_HOLE)
            data += at - start
            if at >= st.st_size:
                return data
        return data + st.st_size - at
    except OSError:
        return st.st_size
    finally:
        os.close(fd)


def fingerprint(files: Sequence[Path]) -> list:
    """Cheap identity of the inputs for the cache key: path, size, modification time."""
    out = []
    for f in files:
        try:
            st = os.stat(f)
            out.append([str(f.resolve()), st.st_size, st.st_mtime_ns])
        except OSError:
            out.append([str(f), -1, -1])       # unreadable now; it will be counted as such
    return out


def source_items(files: List[Path], builtin: Optional[str], text_field: str, max_chars: int,
                 scratch: Optional[Path] = None, decoding: Decoding = Decoding()) -> Iterator[Item]:
    """A source's documents and drops: its builtin documents (pretrain.data.sample), then its files'."""
    if builtin:
        yield from sample.documents(builtin)
    if files:
        yield from read_documents(files, text_field, max_chars, scratch, decoding)


def read_documents(files: Sequence[Path], text_field: str, max_chars: int,
                   scratch: Optional[Path] = None, decoding: Decoding = Decoding()) -> Iterator[Item]:
    """Documents and drops of `files`, in order. scratch: where a compressed parquet file is
    unpacked while it is read (the build's temp directory, so an interrupted run leaves nothing
    elsewhere); the system temp directory if None. decoding: the source's (charsets)."""
    for path in files:
        fmt, comp = file_kind(path)
        reader = {".txt": _read_txt, ".jsonl": _read_jsonl, ".parquet": _read_parquet}[fmt]
        produced = False
        try:
            for item in reader(path, comp, text_field, max_chars, scratch, decoding):
                produced = True
                yield item
        except _READ_ERRORS:
            produced = True
            yield Drop("unreadable")
        if not produced:
            yield Drop("empty_file")


def _open(path: Path, comp: str) -> io.BufferedIOBase:
    """The file's (decompressed) bytes; peek() shows up to _SNIFF of them (the head charsets reads)."""
    if comp == ".gz":
        return io.BufferedReader(gzip.open(path, "rb"), _SNIFF)
    if comp == ".zst":
        raw = open(path, "rb")
        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(raw, closefd=True), _SNIFF)
    return open(path, "rb", buffering=_SNIFF)


def split_text(text: str, max_chars: int) -> List[str]:
    """Cut an over-long document into pieces of at most max_chars, at a line break or space in
    the second half of each window when there is one, so pieces stay readable."""
    pieces, start = [], 0
    while len(text) - start > max_chars:
        lo, hi = start + max_chars // 2, start + max_chars
        cut = max(text.rfind("\n", lo, hi), text.rfind(" ", lo, hi))
        cut = cut + 1 if cut >= lo else hi
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    return pieces


def encodable(text: str) -> bool:
    """False for text no UTF-8 file can hold: a lone surrogate (JSON's "\\ud800" decodes to one)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _pieces(text: str, max_chars: int) -> Iterator[Item]:
    if not encodable(text):
        yield Drop("invalid_unicode")
        return
    parts = split_text(text, max_chars)
    key = piece_key(parts[0]) if len(parts) > 1 else None   # all pieces go to the same split
    for i, part in enumerate(parts):
        yield Doc(part, key=key, part=i)


def _read_txt(path: Path, comp: str, text_field: str, max_chars: int, scratch=None,
              decoding: Decoding = Decoding()) -> Iterator[Item]:
    with _open(path, comp) as f:
        first = f.read(_SNIFF)
        if not first:
            return
        cs = charsets.of_head(path, first, decoding, cut=len(first) == _SNIFF)
        if cs is None:
            yield Drop("binary")
            return
        yield from _txt_items(f, first, cs, str(path), max_chars)


def _txt_items(f, first: bytes, cs: Charset, path: str, max_chars: int) -> Iterator[Item]:
    """The pieces of a .txt file, decoded block by block. A line holding an undecodable byte is
    dropped (named by the file and the offset of its first bad byte); the text before it ends a
    piece, the text after starts a new one (part 0 again: these are not splits for length)."""
    dec = charsets.decoder(cs)
    buf, part, key, emitted, dropped = "", 0, None, False, False
    bad = -1                          # index in buf of the first bad byte not dropped yet
    block, end = first[cs.bom:], cs.bom
    while True:
        final = not block
        text, at = charsets.decode_block(dec, block, final)
        end += len(block)
        if at >= 0 and bad < 0:
            bad = len(buf) + at
        buf += text
        lo = 0                        # buf[:lo] is used up (dropped spans: one slice per block)
        while bad >= 0:
            span = charsets.bad_span(buf, bad, final)
            if span is None:
                break                 # its line goes on past what is decoded: wait for the next block
            start, stop = span
            for piece in split_text(buf[lo:start], max_chars) if buf[lo:start].strip() else ():
                key = key or piece_key(piece)
                yield Doc(piece, key=key, part=part)
                part += 1
            offset = end - len(dec.getstate()[0]) - charsets.byte_len(buf[bad:], cs)
            yield Drop(cs.reason, where=(path, offset))
            emitted, dropped, part, lo = True, True, 0, stop
            bad = charsets.first_mark(buf, stop)
        if lo:
            buf = buf[lo:]
            bad = bad - lo if bad >= 0 else -1
        # Emit full pieces as they fill up; keep the tail (it may continue in the next block).
        while len(buf) > max_chars and (bad < 0 or bad > max_chars + charsets.SPAN_MAX):
            head, buf = _cut(buf, max_chars)
            bad = bad - len(head) if bad >= 0 else -1
            key = key or piece_key(head)
            yield Doc(head, key=key, part=part)
            emitted, part = True, part + 1
        if final:
            break
        block = f.read(_BLOCK)
    if (buf.strip() if dropped else buf) or not emitted:     # no blank piece after a dropped line
        yield Doc(buf, key=key, part=part)


def _cut(text: str, max_chars: int) -> Tuple[str, str]:
    pieces = split_text(text[: max_chars + 1], max_chars)
    head = pieces[0]
    return head, text[len(head):]


def _read_jsonl(path: Path, comp: str, text_field: str, max_chars: int, scratch=None,
                decoding: Decoding = Decoding()) -> Iterator[Item]:
    with _open(path, comp) as f:
        cs = charsets.of_head(path, f.peek(_SNIFF)[:_SNIFF], decoding)
        if cs is None:
            yield Drop("binary")
            return
        f.read(cs.bom)
        yield from _jsonl_items(_lines(f, cs), text_field, max_chars, cs, str(path), cs.bom)


def splittable(path: Path, decoding: Optional[Decoding] = None) -> bool:
    """Whether a large uncompressed .jsonl file can be read in byte ranges (its lines end at a
    b"\n" byte, not UTF-16/32). Its head is read here, so a file that is not UTF-8, of a source
    that names no encoding, is refused before any reading starts."""
    try:
        with open(path, "rb") as f:
            head = f.read(_SNIFF)
    except OSError:
        return True           # then every range counts it as unreadable
    cs = charsets.of_head(path, head, decoding or Decoding(), cut=len(head) == _SNIFF)
    return cs is None or cs.byte_lines


def _lines(f, cs: Charset):
    """The file's lines: bytes where a line ends at a b"\n" byte, else text (UTF-16/32), undecodable
    bytes as charsets' marks."""
    if cs.byte_lines:
        return f
    return io.TextIOWrapper(f, encoding=cs.codec, errors=charsets.MARK, newline="\n")


def read_jsonl_range(path: Path, start: int, stop: int, text_field: str, max_chars: int,
                     decoding: Decoding = Decoding()) -> Iterator[Item]:
    """The documents of an uncompressed .jsonl file whose lines start in bytes [start, stop): one
    split of a large file (of a charset whose lines end at a b"\n" byte). The splits of a file
    together yield exactly what read_documents does (a binary file is one Drop, from the split at
    0; an unreadable one a Drop per split; a large file of blank lines only is not counted as an
    empty_file)."""
    try:
        with open(path, "rb") as f:
            head = f.read(_SNIFF)
            cs = charsets.of_head(path, head, decoding, cut=len(head) == _SNIFF)
            if cs is None:
                if start == 0:
                    yield Drop("binary")
                return
            if start > cs.bom:
                f.seek(start - 1)
                f.readline()            # the line holding byte start-1 belongs to the split before
            else:
                f.seek(cs.bom)

            def in_range() -> Iterator[bytes]:
                while f.tell() < stop:
                    line = f.readline()
                    if not line:
                        return
                    yield line
            at = f.tell()
            yield from _jsonl_items(in_range(), text_field, max_chars, cs, str(path), at)
    except _READ_ERRORS:
        yield Drop("unreadable")


def _jsonl_items(lines, text_field: str, max_chars: int, cs: Charset = charsets.UTF8, path: str = "",
                 at: int = 0) -> Iterator[Item]:
    """The documents of a .jsonl file's lines (bytes, or text for UTF-16/32), the first at byte `at`."""
    utf8, byte_lines = cs.codec == "utf-8", cs.byte_lines
    for line in lines:
        line_at = at
        at += len(line) if byte_lines else charsets.byte_len(line, cs)
        if not line.strip():
            continue
        try:
            if utf8:
                text = line.decode()
                if text.startswith("\ufeff"):  # a byte order mark (what some editors start a file with)
                    text = text[1:]            # is not JSON (the utf-8-sig codec did this, in Python)
            else:
                text = _decoded(line, cs)
            obj = _JSON.decode(text)
        except UnicodeDecodeError:
            yield Drop(cs.reason, where=(path, line_at + charsets.bad_offset(line, cs)))
            continue
        except (ValueError, RecursionError):       # RecursionError: "[[[[..." nested too deep
            yield Drop("malformed_json")
            continue
        text = obj.get(text_field) if isinstance(obj, dict) else None
        if not isinstance(text, str):
            yield Drop("missing_field")
            continue
        yield from _pieces(text, max_chars)


def _decoded(line, cs: Charset) -> str:
    """A line of another charset as text: bytes decoded strictly; text (already decoded, with
    marks) checked for marks. Raises UnicodeDecodeError for a line with undecodable bytes."""
    if isinstance(line, bytes):
        return line.decode(cs.codec)
    if charsets.first_mark(line) >= 0:
        raise UnicodeDecodeError(cs.codec, b"", 0, 1, "undecodable bytes")
    return line


def _read_parquet(path: Path, comp: str, text_field: str, max_chars: int, scratch=None,
                  decoding=None) -> Iterator[Item]:
    """Parquet's strings are UTF-8 by its format: `decoding` does not apply."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    tmp = None
    try:
        if comp:   # parquet needs random access: decompress to a temp file first (streamed)
            fd, tmp = tempfile.mkstemp(suffix=".parquet", dir=scratch)
            with os.fdopen(fd, "wb") as out, _open(path, comp) as src:
                shutil.copyfileobj(src, out, _BLOCK)
            path = Path(tmp)
        try:
            pf = pq.ParquetFile(path)
        except (pa.ArrowException, ValueError):
            yield Drop("unreadable")
            return
        if text_field not in pf.schema_arrow.names:
            if pf.metadata.num_rows:
                yield Drop("missing_field", pf.metadata.num_rows)
            return
        seen = 0
        try:
            for batch in pf.iter_batches(columns=[text_field], batch_size=1024):
                for value in _texts(batch.column(0)):
                    seen += 1
                    if isinstance(value, Drop):
                        yield value
                    else:
                        yield from _pieces(value, max_chars)
        except (pa.ArrowException, ValueError):
            # The rest of the file cannot be read: count its rows (the footer knows how many).
            yield Drop("unreadable", max(1, pf.metadata.num_rows - seen))
    finally:
        if tmp:
            with suppress(OSError):      # gone already if the build's temp directory was removed
                os.unlink(tmp)


def _texts(column) -> Iterator[Union[str, Drop]]:
    """A parquet column's values as str, each row decoded on its own (a badly encoded row drops
    that row, not the rest of the file); a null is a missing field, a value of another type is
    dropped as not_a_string:<its column type>."""
    import pyarrow as pa
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        raw = column.cast(pa.large_binary() if pa.types.is_large_string(column.type) else pa.binary())
        for b in raw.to_pylist():
            if b is None:
                yield Drop("missing_field")
                continue
            try:
                yield b.decode("utf-8")
            except UnicodeDecodeError:
                yield Drop("invalid_utf8")
        return
    # Another type (e.g. list<string>) is not one text: its rows are dropped under a reason naming
    # the type, so the summary says what the column holds (joining the items would guess a separator).
    wrong = f"not_a_string:{_type_name(column.type)}"
    for v in column.to_pylist():
        yield v if isinstance(v, str) else Drop("missing_field" if v is None else wrong)


def _type_name(t) -> str:
    """An arrow type as a user reads it: list<string> (arrow's own str says list<element: string>)."""
    import pyarrow as pa
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"list<{_type_name(t.value_type)}>"
    return str(t)
