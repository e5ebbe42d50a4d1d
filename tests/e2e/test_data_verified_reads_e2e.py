"""Issue 40 item 2: every byte training reads is verified (pretrain/data/rowcache.py).

Before: the loader checked the row cache beside each shard (`<shard>.<sha16>.ids.npy`, ...) for its
size and shape only. 4 KB of random bytes in it crashed training at step ~57 with a 49-line
MindSpore Gather traceback; 4 KB set to a valid token id trained silently on the wrong tokens; a
damaged .db index went unchecked. Now the cache carries checksums written when it was built, a
mismatch rebuilds it from the verified shard (one warning line) and the batches are a clean run's,
and token ids beyond the vocabulary are one line naming the shard, the row and the id.
"""
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from pretrain.config.errors import PretrainDataError
from pretrain.data import rowcache
from pretrain.data.rowcache import ShardRows
from pretrain.train.metrics import read_metrics
from tests.helpers import cli
from tests.helpers.data_files import SEQ
from tests.helpers.files_run import ARGS, corpus
from tests.helpers.verified_cache import build, copy, loader, overwrite


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build(tmp_path_factory.mktemp("verified"))


def train(cwd: Path, run: str, cache: str):
    """`python -m pretrain` (a shrunken phase=general run on cwd/data) into cwd/run: its train losses
    and the process."""
    proc = cli.run(*ARGS, f"run_dir={cwd / run}", cwd=cwd, cache=cwd / cache, timeout=600, check=True)
    return [r["loss"] for r in read_metrics(cwd / run / "metrics.jsonl") if r["kind"] == "train"], proc


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory):
    """A clean run's losses, its corpus and data cache (cwd/clean-cache, never modified)."""
    cwd = tmp_path_factory.mktemp("train")
    corpus(cwd)
    return cwd, train(cwd, "clean", "clean-cache")[0]


@pytest.mark.slow
@pytest.mark.parametrize("fill", ["random", "token"])
def test_training_on_a_damaged_row_cache_trains_the_clean_runs_losses(clean_run, fill):
    """End to end: every row cache of a copy of the clean run's data cache damaged (random bytes:
    was a Gather traceback; one valid token id: was trained on silently); the run says so per file
    it reads, rebuilds them and trains exactly the clean run's losses."""
    cwd, clean = clean_run
    shutil.copytree(cwd / "clean-cache", cwd / fill)
    damaged = sorted((cwd / fill / "datasets").glob("*/train-*.ids.npy"))
    for f in damaged:                     # all of the data: whichever rows the few steps draw
        offset = np.load(f, mmap_mode="r").offset
        size = f.stat().st_size - offset
        overwrite(f, offset, np.random.default_rng(1).bytes(size) if fill == "random" else
                  np.full(size // 4, 7, "<i4").tobytes())
    losses, proc = train(cwd, f"run-{fill}", fill)
    assert losses == clean
    said = [ln for ln in proc.stderr.splitlines() if ln.startswith("warning:")]
    assert said and all(re.match(r"warning: .*ids\.npy: rows \d+-\d+ differ from their checksum", ln)
                        for ln in said), said           # one per file the phase's mix reads
    assert len({ln.split(": rows")[0] for ln in said}) == len(said)


def cache_file(prepared, suffix: str) -> Path:
    return next(prepared["web"].dir.glob(f"train-*{suffix}"))


def warnings(capsys):
    return [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("warning:")]


def same_batches(prepared, want) -> bool:
    """Every batch of `want` (one pass over all rows), from a fresh loader."""
    got = loader(prepared)
    for step, batch in enumerate(want):
        if not all(np.array_equal(batch[k], v) for k, v in got.batch(step).items()):
            return False
    return True


def random_bytes(p):        # 4 KB of random bytes inside the ids (was: a Gather traceback at step ~57)
    overwrite(cache_file(p, ".ids.npy"), 50_000, np.random.default_rng(0).bytes(4096))


def valid_token(p):         # 4 KB of one valid token id (was: trained on silently)
    overwrite(cache_file(p, ".ids.npy"), 50_000, np.full(1024, 7, np.int32).tobytes())


def header(p):              # the same shape and size, read in another order
    f = cache_file(p, ".ids.npy")
    f.write_bytes(f.read_bytes().replace(b"'fortran_order': False", b"'fortran_order': True ", 1))


def swapped_documents(p):   # two document lengths swapped: the token total still adds up
    f = cache_file(p, ".seg_lens.npy")
    lens = np.load(f)
    i = int(np.flatnonzero(lens[:-1] != lens[1:])[0])
    lens[[i, i + 1]] = lens[[i + 1, i]]
    np.save(f, lens)


def no_checksums(p):        # a row cache written before they had checksums
    cache_file(p, ".sums.json").unlink()


def damaged_checksums(p):
    overwrite(cache_file(p, ".sums.json"), 40, b"\xff\x00" * 8)


@pytest.mark.parametrize("damage, said", [
    (random_bytes, r"ids\.npy: rows \d+-\d+ differ from their checksum \(damaged on disk\)"),
    (valid_token, r"ids\.npy: rows \d+-\d+ differ from their checksum"),
    (header, r"ids\.npy: its header differs from its checksum"),
    (swapped_documents, r"seg_lens\.npy: its bytes differ from its checksum"),
    (no_checksums, r"sums\.json: missing \(a row cache from before they had checksums\)"),
    (damaged_checksums, r"sums\.json: unreadable"),
], ids=lambda v: getattr(v, "__name__", ""))
def test_a_damaged_row_cache_is_rebuilt_and_the_batches_are_a_clean_runs(built, tmp_path, capsys, damage,
                                                                       said):
    prepared = copy(built, tmp_path)
    clean = {f.name: f.read_bytes() for f in prepared["web"].dir.glob("train-*.npy")}
    damage(prepared)
    capsys.readouterr()
    assert same_batches(prepared, built[2])
    (line,) = warnings(capsys)
    assert re.search(said, line), line
    assert line.endswith("; rebuilding the cached rows of train-00000-of-00001.mindrecord from the shard")
    assert {f.name: f.read_bytes() for f in prepared["web"].dir.glob("train-*.npy")} == clean
    assert same_batches(prepared, built[2]) and not warnings(capsys)     # rebuilt once, then verified


def test_a_damaged_block_is_caught_when_its_row_is_first_read_not_before(built, tmp_path, capsys,
                                                                        monkeypatch):
    """Opening hashes only the small files (cost O(rows), module doc); the ids are verified block by
    block before any of their rows is handed out."""
    prepared = copy(built, tmp_path)
    info = prepared["web"].manifest["train"]["shards"][0]

    def shard_rows():
        return ShardRows(prepared["web"].train_shards[0], info["sha256"], info["rows"], SEQ + 1,
                         info["tokens"], index_sha256=info["index_sha256"], vocab_size=400)

    for f in prepared["web"].dir.glob("train-*.mindrecord.*.*"):
        f.unlink()
    monkeypatch.setattr(rowcache, "BLOCK_BYTES", 1 << 16)   # this small shard in blocks of 252 rows
    shard_rows()
    block_rows = json.loads(cache_file(prepared, ".sums.json").read_text())["ids"]["block_rows"]
    last = info["rows"] - 1
    assert last // block_rows >= 1                          # the last row is not in the first block
    ids = cache_file(prepared, ".ids.npy")
    overwrite(ids, np.load(ids, mmap_mode="r").offset + last * (SEQ + 1) * 4,
              np.full(SEQ + 1, 5, np.int32).tobytes())
    capsys.readouterr()
    rows = shard_rows()
    first, _ = rows.row(0)
    assert not warnings(capsys)
    row, _ = rows.row(last)
    (line,) = warnings(capsys)
    assert f"rows {last // block_rows * block_rows}-{last} differ" in line
    assert not (np.asarray(row) == 5).all() and np.array_equal(first, rows.row(0)[0])


def test_two_readers_of_a_damaged_shard_rebuild_it_once(built, tmp_path, capsys):
    """Each phase's loader opens the shards it mixes before any trains: the second to reach the damaged
    block maps the first's rebuilt files instead of rebuilding (and warning) again."""
    prepared = copy(built, tmp_path)
    info = prepared["web"].manifest["train"]["shards"][0]
    opened = [ShardRows(prepared["web"].train_shards[0], info["sha256"], info["rows"], SEQ + 1, info["tokens"],
                        index_sha256=info["index_sha256"], vocab_size=400) for _ in range(2)]
    clean = [np.array(opened[0].row(k)[0]) for k in range(info["rows"])]
    valid_token(prepared)
    reopened = [ShardRows(prepared["web"].train_shards[0], info["sha256"], info["rows"], SEQ + 1,
                          info["tokens"], index_sha256=info["index_sha256"], vocab_size=400) for _ in range(2)]
    capsys.readouterr()
    for rows in reopened:
        assert all(np.array_equal(rows.row(k)[0], clean[k]) for k in range(info["rows"]))
    assert len(warnings(capsys)) == 1


def test_a_damaged_shard_index_is_built_again_from_the_shard(built, tmp_path, capsys):
    prepared = copy(built, tmp_path)
    for f in prepared["web"].dir.glob("*.npy"):
        f.unlink()                         # the index is read only when the row cache is built
    index = Path(f"{prepared['web'].train_shards[0]}.db")
    good = index.read_bytes()
    overwrite(index, 5000, b"\x00" * 512)
    capsys.readouterr()
    assert same_batches(prepared, built[2])
    err = capsys.readouterr().err
    assert f"warning: {index}: its checksum differs from its manifest's; building it again from " \
           f"{prepared['web'].train_shards[0].name}" in err
    assert index.read_bytes() == good and not list(prepared["web"].dir.glob(".*"))


def test_token_ids_beyond_the_vocabulary_are_one_line_naming_shard_row_and_id(built, tmp_path):
    prepared = copy(built, tmp_path)
    shard = prepared["web"].train_shards[0]
    with pytest.raises(PretrainDataError) as caught:
        loader(prepared, vocab_size=50).batch(0)      # the data's tokenizer has 400 pieces
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{shard} row ") and "is outside model.vocab_size=50 (ids 0..49)" in message
    row, token = (int(x) for x in re.search(r"row (\d+): token id (\d+) ", message).groups())
    assert token >= 50 and token in np.load(cache_file(prepared, ".ids.npy"))[row]
    assert loader(prepared, vocab_size=400).batch(0)["input_ids"].max() < 400
