"""Issue 27: a cache key is the inputs' content, not their size and mtime; here the whole data step
built, reused, and built again after a same-size edit with its mtime set back."""
import os

import pytest

from pretrain.data import prepare
from tests.helpers.data_files import data_cfg, paragraphs, write_jsonl


@pytest.mark.slow
def test_a_same_size_edit_with_its_mtime_restored_is_rebuilt(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    texts = paragraphs()[:120]
    path = write_jsonl(src / "a.jsonl", texts)
    cfg = data_cfg(tmp_path / "cache", {"web": [src]})
    first = prepare(cfg, progress=False)["web"]
    assert not first.reused and prepare(cfg, progress=False)["web"].reused   # unchanged: reused
    stat = path.stat()
    edited = [texts[0].replace("e", "a", 40), *texts[1:]]   # the same size, other words
    write_jsonl(path, edited)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns
    again = prepare(cfg, progress=False)["web"]
    assert not again.reused and again.dir != first.dir
    assert again.manifest["train"]["shards"] != first.manifest["train"]["shards"]
