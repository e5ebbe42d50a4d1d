"""Caches verify what they reuse, and a moved cache still works.

Reproduces issue 12 item 6. Before: a truncated .npy in the dataset cache raised numpy's "mmap
length is greater than file size"; a truncated shard, document store or tokenizer was reused as
if whole; after `mv cache new_cache` the manifests still pointed at the old tokenizer path, and
the error blamed data.tokenizer.path, a key the user never set.
"""
import shutil
from pathlib import Path

import numpy as np
import pytest

from pretrain.config.errors import PretrainDataError
from pretrain.data import prepare
from pretrain.data import tokenizer as tokenizers
from pretrain.data.loader import BatchLoader
from tests.helpers.data_cli import cli_data
from tests.helpers.data_files import SEQ, data_cfg, paragraphs, write_jsonl


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A small prepared cache (one jsonl source), never modified: tests work on copies."""
    root = tmp_path_factory.mktemp("reuse")
    src = root / "src"
    src.mkdir()
    write_jsonl(src / "a.jsonl", paragraphs()[:300])
    cache = root / "cache"
    prepare(data_cfg(cache, {"web": [src]}), progress=False)
    return src, cache


def copy_cache(built, tmp_path) -> Path:
    cache = tmp_path / "cache"
    shutil.copytree(built[1], cache)
    return cache


def loader(prepared):
    return BatchLoader(prepared, {"web": 1.0}, batch_size=4, seq_length=SEQ, seed=3)


def test_a_truncated_npy_row_cache_is_rebuilt_with_a_warning(built, tmp_path, capsys):
    cache = copy_cache(built, tmp_path)
    prepared = prepare(data_cfg(cache, {"web": [built[0]]}), progress=False)
    want = loader(prepared).batch(5)                      # writes the .npy row cache
    ids = next(prepared["web"].dir.glob("train-*.ids.npy"))
    size = ids.stat().st_size
    with open(ids, "r+b") as f:
        f.truncate(size // 2)                             # was: "mmap length is greater than file size"
    capsys.readouterr()
    got = loader(prepared).batch(5)
    assert all(np.array_equal(want[k], got[k]) for k in want)
    err = capsys.readouterr().err
    assert f"warning: {ids}: {size // 2} bytes, expected {size}" in err and "rebuilding" in err
    assert ids.stat().st_size == size


def test_npy_row_cache_with_wrong_document_lengths_is_rebuilt(built, tmp_path, capsys):
    cache = copy_cache(built, tmp_path)
    prepared = prepare(data_cfg(cache, {"web": [built[0]]}), progress=False)
    want = loader(prepared).batch(2)
    segs = next(prepared["web"].dir.glob("train-*.seg_lens.npy"))
    arr = np.load(segs)
    np.save(segs, np.zeros_like(arr))                     # same size, wrong content
    got = loader(prepared).batch(2)
    assert all(np.array_equal(want[k], got[k]) for k in want)
    assert "document lengths do not add up" in capsys.readouterr().err


def test_a_changed_shard_is_refused_naming_the_dataset_dir(built, tmp_path):
    cache = copy_cache(built, tmp_path)
    prepared = prepare(data_cfg(cache, {"web": [built[0]]}), progress=False)
    for f in prepared["web"].dir.glob("*.npy"):
        f.unlink()
    shard = prepared["web"].train_shards[0]
    data = bytearray(shard.read_bytes())
    data[-100] ^= 0xFF                                    # same size: only the checksum can tell
    shard.write_bytes(bytes(data))
    with pytest.raises(PretrainDataError, match=f"checksum differs.*delete {prepared['web'].dir}"):
        loader(prepared)


@pytest.mark.parametrize("damage", ["shard", "store", "tokenizer", "manifest"])
def test_a_damaged_cache_entry_is_built_again(built, tmp_path, capsys, damage):
    cache = copy_cache(built, tmp_path)
    want = prepare(data_cfg(built[1], {"web": [built[0]]}), progress=False)["web"]
    victim = {"shard": lambda: next((cache / "datasets").glob("*/train-*.mindrecord")),
              "store": lambda: next((cache / "clean").glob("*/docs.txt")),
              "tokenizer": lambda: next((cache / "tokenizers").glob("*/tokenizer.model")),
              "manifest": lambda: next((cache / "datasets").glob("*/manifest.json"))}[damage]()
    with open(victim, "r+b") as f:
        f.truncate(victim.stat().st_size // 3)
    if damage == "store":                 # the store is read only when the dataset is built
        shutil.rmtree(cache / "datasets")
    got = prepare(data_cfg(cache, {"web": [built[0]]}), progress=False)["web"]
    assert f"warning: {victim.parent}: " in capsys.readouterr().err
    assert got.manifest["train"]["shards"] == want.manifest["train"]["shards"]     # rebuilt byte-identical
    assert victim.stat().st_size > 0 and not list(cache.rglob(".*tmp*"))


def test_a_moved_cache_is_reused_where_it_now_is(built, tmp_path):
    old = copy_cache(built, tmp_path)
    new = tmp_path / "elsewhere" / "cache"
    new.parent.mkdir()
    shutil.move(str(old), str(new))
    prepared = prepare(data_cfg(new, {"web": [built[0]]}), progress=False)["web"]
    assert prepared.reused
    assert prepared.tokenizer_path.is_relative_to(new.resolve()) and prepared.tokenizer_path.is_file()
    assert not Path(prepared.manifest["tokenizer"]["path"]).is_absolute()
    tokenizers.load(prepared.tokenizer_path)
    assert loader({"web": prepared}).batch(0)["input_ids"].shape == (4, SEQ)


def test_a_missing_cached_tokenizer_names_the_cache_not_data_tokenizer_path(built, tmp_path):
    cache = copy_cache(built, tmp_path)
    model = next((cache / "tokenizers").glob("*/tokenizer.model"))
    model.write_bytes(b"not a model")
    with pytest.raises(PretrainDataError) as exc:
        tokenizers.load(model)
    assert str(exc.value).startswith(f"cached tokenizer '{model}' is not a sentencepiece model")
    assert f"data.cache_dir '{cache}'" in str(exc.value) and "data.tokenizer.path" not in str(exc.value)


def test_an_unwritable_cache_is_one_line_naming_data_cache_dir(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    write_jsonl(src / "a.jsonl", paragraphs()[:20])
    cache = tmp_path / "cache"
    cache.write_text("a file where the cache directory should be")
    proc = cli_data(tmp_path, f"data.sources.general.paths=[{src}]", cache=cache)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: data.cache_dir={cache}: Not a directory ({cache / 'clean'}")
    assert len(proc.stderr.splitlines()) == 1
