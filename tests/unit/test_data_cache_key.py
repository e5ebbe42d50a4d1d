"""Issue 27: a cache key is the inputs' content, not their size and mtime. Before, a same-size edit
with its mtime set back (`touch -d`, a restore, a copy with -p) reused the stale documents, tokenizer
and shards: the key was path + size + mtime, while README said "hashes of the inputs"."""
import os

from pretrain.data.prepare import _plan
from tests.helpers.data_files import data_cfg, write_jsonl


def test_the_clean_key_follows_a_same_size_edit_with_its_mtime_restored(tmp_path):
    """The key alone (milliseconds): the first stage's key is what every later stage's is made from."""
    src = tmp_path / "src"
    src.mkdir()
    path = write_jsonl(src / "a.jsonl", ["one document", "another one"])
    cfg = data_cfg(tmp_path / "cache", {"web": [src]})
    before, stat = _plan("web", cfg.sources.web, cfg).clean_key, path.stat()
    write_jsonl(path, ["one docunent", "another one"])
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (stat.st_size, stat.st_mtime_ns)
    assert _plan("web", cfg.sources.web, cfg).clean_key != before
