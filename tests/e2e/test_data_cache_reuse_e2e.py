"""Caches verify what they reuse, and a moved cache still works.

Reproduces issue 12 item 6. Before: a truncated .npy in the dataset cache raised numpy's "mmap
length is greater than file size"; a truncated shard, document store or tokenizer was reused as
if whole; after `mv cache new_cache` the manifests still pointed at the old tokenizer path, and
the error blamed data.tokenizer.path, a key the user never set.
"""
from pretrain.data.loader import BatchLoader
from tests.helpers.data_cli import cli_data
from tests.helpers.data_files import SEQ, paragraphs, write_jsonl


def loader(prepared):
    return BatchLoader(prepared, {"web": 1.0}, batch_size=4, seq_length=SEQ, seed=3)


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
