"""The row cache beside each shard, with its checksums: every byte training reads is verified first.

MindDataset reads a MindRecord shard at 6-10 M tokens/s, a memory map at ~270 M (DESIGN §5), so
each shard is read once and kept beside it in files named by the shard's checksum:
  <shard>.<sha16>.ids.npy       int32 [rows, seq_length + 1]: the rows' tokens
  <shard>.<sha16>.seg_lens.npy  int32: the document pieces of every row, in row order
  <shard>.<sha16>.seg_off.npy   int64 [rows + 1]: row i's pieces are seg_lens[seg_off[i]:seg_off[i + 1]]
  <shard>.<sha16>.sums.json     their checksums, computed from the arrays read off the shard, written last
The cache is built only from a shard whose sha256 matches its manifest, read through a .db index
whose sha256 matches too (a damaged index is built again from the shard: it depends on nothing else).

What is verified, and when (sha256 runs ~1 GB/s here; a 100 M-token cache holds 400 MB of ids):
  opening  each file's header and size, the shapes and the token total against the manifest, the
           sha256 of the ids header and of the whole of seg_lens and seg_off (a few bytes a row, read
           in full anyway to count each row's tokens);
  a row    the block of whole rows it lies in (~256 KiB of ids), the first time this process reads a
           row of it: the block's sha256, then its token ids against the vocabulary (a vectorised
           min and max; padding is pad_id, a valid id).
Opening so costs O(rows), not O(tokens), however large the dataset (hashing all ids at start-up would
take each rank 40 s for 10 B tokens, as every rank reads from every shard), and no row reaches a batch
unverified. The block size weighs the first read of a row (~0.2 ms of hashing) against the
checksums each process holds (16 hex digits a block: 0.006% of the ids, 24 MB for 100 B tokens).
A mismatch rebuilds the cache from the shard with one warning line, and the row is read from the
rebuilt cache: training gets what a clean cache gives. What a rebuild cannot mend (the shard changed,
ids beyond the vocabulary in the shard itself) is refused in one line.
"""
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Optional, Tuple

import numpy as np

from pretrain.config.errors import PretrainDataError
from pretrain.data.fsutil import save_npy_atomic, temp_dir_for, write_json_atomic
from pretrain.data.hashing import file_sha256
from pretrain.data.mindrecord_file import write_index
from pretrain.data.shards import read_shard

PARTS = {"ids": np.dtype(np.int32), "seg_lens": np.dtype(np.int32), "seg_off": np.dtype(np.int64)}
FORMAT = 1
BLOCK_BYTES = 1 << 18      # ids are verified in blocks of whole rows of about this many bytes
DIGEST_CHARS = 16          # a block's digest: 64 bits of its sha256 (a random change passes 1 in 2^64)


def block_digest(rows: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(rows)).hexdigest()[:DIGEST_CHARS]


class ShardRows:
    """One shard's rows from its row cache: ids [rows, capacity], seg_lens, seg_off (memory-mapped)
    and the tokens of each row; row(i) verifies the block of row i before it hands it out.
    vocab_size: token ids must be below it (None: not range-checked)."""

    def __init__(self, path: Path, sha256: str, rows: int, capacity: int, tokens: Optional[int] = None, *,
                 index_sha256: Optional[str] = None, vocab_size: Optional[int] = None) -> None:
        self.path, self.sha256, self.rows, self.capacity = Path(path), sha256, rows, capacity
        self.tokens, self.index_sha256, self.vocab_size = tokens, index_sha256, vocab_size
        stem = self.path.with_name(f"{self.path.name}.{sha256[:16]}")
        self.files = {part: Path(f"{stem}.{part}.npy") for part in PARTS}
        self.sums_file = Path(f"{stem}.sums.json")
        if rows == 0:
            self.ids = np.zeros((0, capacity), np.int32)
            self.seg_lens, self.seg_off = np.zeros(0, np.int32), np.zeros(1, np.int64)
            self._block_rows, self._blocks, self._verified = 1, "", np.zeros(0, bool)
        elif any(f.exists() for f in self.files.values()):
            why = self._open()
            if why is not None:
                self._rebuild(why)
        else:
            self._rebuild(None)          # first use: built without a word, as it always was
        cum = np.concatenate([[0], np.cumsum(self.seg_lens, dtype=np.int64)])
        self.row_tokens = cum[self.seg_off[1:]] - cum[self.seg_off[:-1]]

    def row(self, i: int) -> Tuple[np.ndarray, np.ndarray]:
        """Row i's ids [capacity] and the lengths of its document pieces, verified."""
        k = i // self._block_rows
        if not self._verified[k]:
            self._verify(k)
        return self.ids[i], self.seg_lens[self.seg_off[i]:self.seg_off[i + 1]]

    # ------------------------------------------------------------------ verifying

    def _verify(self, k: int) -> None:
        a = k * self._block_rows
        span = slice(a, min(a + self._block_rows, self.rows))
        want = slice(k * DIGEST_CHARS, (k + 1) * DIGEST_CHARS)
        rows = f"{self.files['ids']}: rows {span.start}-{span.stop - 1}"
        if block_digest(self.ids[span]) != self._blocks[want] and not self._rebuilt_since(span, want):
            self._rebuild(f"{rows} differ from their checksum (damaged on disk)")
            if block_digest(self.ids[span]) != self._blocks[want]:
                raise PretrainDataError(
                    f"{rows} differ from their checksum again right after they were rebuilt from "
                    f"{self.path.name}: the disk under {self.path.parent} returns other bytes than were "
                    f"written to it; check that disk")
        self._check_range(span.start, self.ids[span])
        self._verified[k] = True

    def _rebuilt_since(self, span: slice, want: slice) -> bool:
        """Whether another reader of this shard (the loader of another phase, which opened it too) has
        rebuilt the files since this one mapped them: the files are replaced whole, so this mapping still
        reads the damaged ones. Then it maps the new ones instead of rebuilding (and warning) again."""
        if os.stat(self.files["ids"]).st_ino == self._ids_inode or self._open() is not None:
            return False
        return block_digest(self.ids[span]) == self._blocks[want]

    def _check_range(self, first: int, block: np.ndarray) -> None:
        V = self.vocab_size
        if V is None or not block.size or (block.min() >= 0 and block.max() < V):
            return
        r, c = np.argwhere((block < 0) | (block >= V))[0]
        raise PretrainDataError(
            f"{self.path} row {first + r}: token id {block[r, c]} is outside model.vocab_size={V} "
            f"(ids 0..{V - 1}); the shard was tokenized with another vocabulary: delete {self.path.parent} "
            f"and prepare the data again with the model's tokenizer")

    def _open(self) -> Optional[str]:
        """Map the cache, checking everything but the ids blocks (module doc): why it cannot be used,
        or None."""
        for f in self.files.values():
            why = _npy_problem(f)
            if why:
                return why
        ids, seg_lens, seg_off = arrays = [np.load(f, mmap_mode="r") for f in self.files.values()]
        for (part, dtype), a in zip(PARTS.items(), arrays):
            if a.dtype != dtype:
                return f"{self.files[part]}: holds {a.dtype}, not {dtype}"
        if ids.shape != (self.rows, self.capacity):
            return f"{self.files['ids']}: holds {ids.shape} rows x tokens, the manifest says " \
                   f"({self.rows}, {self.capacity})"
        if seg_off.shape != (self.rows + 1,) or seg_off[0] != 0 or seg_off[-1] != len(seg_lens) or \
                (self.tokens is not None and int(np.sum(seg_lens, dtype=np.int64)) != self.tokens):
            return f"{self.files['seg_lens']}: document lengths do not add up to the manifest's " \
                   f"{self.tokens} tokens in {self.rows} rows"
        try:
            sums = json.loads(self.sums_file.read_text())
            block_rows, blocks = int(sums["ids"]["block_rows"]), str(sums["ids"]["blocks"])
            fits = sums["format"] == FORMAT and sums["shard_sha256"] == self.sha256 and block_rows >= 1 and \
                len(blocks) == DIGEST_CHARS * -(-self.rows // block_rows)
            want = {"ids": sums["ids"]["head_sha256"], "seg_lens": sums["seg_lens"]["sha256"],
                    "seg_off": sums["seg_off"]["sha256"]}
        except FileNotFoundError:
            return f"{self.sums_file}: missing (a row cache from before they had checksums)"
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return f"{self.sums_file}: unreadable ({exc})"
        if not fits:
            return f"{self.sums_file}: does not describe the {self.rows} rows of {self.path.name}"
        have = {"ids": _head_sha256(self.files["ids"], ids.offset),
                **{part: file_sha256(self.files[part]) for part in ("seg_lens", "seg_off")}}
        for part in PARTS:
            if have[part] != want[part]:
                what = "its header differs" if part == "ids" else "its bytes differ"
                return f"{self.files[part]}: {what} from its checksum (damaged on disk)"
        self.ids, self.seg_lens, self.seg_off = arrays
        self._ids_inode = os.stat(self.files["ids"]).st_ino
        self._block_rows, self._blocks = block_rows, blocks
        self._verified = np.zeros(len(blocks) // DIGEST_CHARS, bool)   # this mapping's: none yet
        return None

    # ------------------------------------------------------------------ building

    def _rebuild(self, why: Optional[str]) -> None:
        if why:
            print(f"warning: {why}; rebuilding the cached rows of {self.path.name} from the shard",
                  file=sys.stderr, flush=True)
        self._write()
        why = self._open()
        if why is not None:
            raise PretrainDataError(f"{self.path}: {why}; the dataset in {self.path.parent} does not match "
                                    f"its manifest: delete that directory and prepare again to rebuild it")

    def _write(self) -> None:
        """Read the verified shard and write the cache, then its checksums (so a cache whose writing
        was cut short has none and is rebuilt). Files are replaced whole: a process that mapped the
        old ones keeps reading them."""
        _check_shard(self.path, self.sha256)
        if self.index_sha256:
            _check_index(self.path, self.index_sha256)
        ids, seg_lens, seg_off = read_shard(self.path)
        block_rows = max(1, BLOCK_BYTES // (self.capacity * PARTS["ids"].itemsize))
        data = save_npy_atomic(self.files["ids"], ids)
        sums = {"format": FORMAT, "shard_sha256": self.sha256,
                "ids": {"head_sha256": hashlib.sha256(data[:len(data) - ids.nbytes]).hexdigest(),
                        "block_rows": block_rows,
                        "blocks": "".join(block_digest(ids[a:a + block_rows])
                                          for a in range(0, len(ids), block_rows))}}
        for part, array in (("seg_lens", seg_lens), ("seg_off", seg_off)):
            sums[part] = {"sha256": hashlib.sha256(save_npy_atomic(self.files[part], array)).hexdigest()}
        write_json_atomic(self.sums_file, sums)


def _head_sha256(path: Path, offset: int) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read(offset)).hexdigest()


def _npy_problem(f: Path) -> Optional[str]:
    """Why a .npy file cannot be mapped (a header that does not parse, a size that is not the
    header plus the data), or None."""
    try:
        with open(f, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                np.lib.format.read_array_header_2_0
            shape, _, dtype = read(fh)
            want = fh.tell() + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        have = f.stat().st_size
    except (OSError, ValueError) as exc:
        return f"{f}: unreadable ({exc})"
    return None if have == want else f"{f}: {have} bytes, expected {want} (truncated or damaged)"


def _check_shard(path: Path, sha256: str) -> None:
    """The shard's bytes are the ones its manifest recorded, or a one-line refusal (nothing here can
    rebuild a shard: preparing does)."""
    try:
        same = file_sha256(path) == sha256       # read once per cache build: the cost of the read itself
    except OSError as exc:
        raise PretrainDataError(f"{path}: cannot read it ({exc.strerror}); delete {path.parent} and prepare "
                                f"again to rebuild the dataset") from None
    if not same:
        raise PretrainDataError(f"{path}: its checksum differs from its manifest's (the file was changed "
                                f"or damaged); delete {path.parent} and prepare again to rebuild the dataset")


def _check_index(path: Path, sha256: str) -> None:
    """The shard's .db index (what MindDataset reads the shard through) as its manifest recorded it:
    a damaged or missing one is built again from the verified shard, in a temp directory, and put in
    place only once its checksum matches."""
    index = Path(f"{path}.db")
    try:
        if file_sha256(index) == sha256:
            return
        why = "its checksum differs from its manifest's"
    except OSError as exc:
        why = f"cannot read it ({exc.strerror})"
    print(f"warning: {index}: {why}; building it again from {path.name}", file=sys.stderr, flush=True)
    tmp = temp_dir_for(index)
    try:
        copy = tmp / path.name          # the index records the shard's name: keep it
        try:
            os.link(path, copy)
        except OSError:
            shutil.copyfile(path, copy)
        write_index(copy)
        built = Path(f"{copy}.db")
        if file_sha256(built) != sha256:
            raise PretrainDataError(f"{index}: built again from {path.name}, its checksum still differs from "
                                    f"its manifest's; delete {path.parent} and prepare again to rebuild the "
                                    f"dataset")
        os.replace(built, index)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
