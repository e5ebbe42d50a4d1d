"""Issue 27: a disk that fills up during data preparation is one line naming data.cache_dir and what
to do. Before: a 40-line OSError traceback (numpy's zip writer, in a pool worker, names no file, so
the cache's own handler let it through) or a 73-line MindRecord RuntimeError ("No free disk to be
used while writing mindrecord files"). A real full disk: a small tmpfs as the cache (root only)."""
import os
import subprocess

import pytest

from pretrain.config.errors import PretrainDataError
from pretrain.data import prepare
from tests.helpers.data_files import data_cfg, paragraphs, write_jsonl

pytestmark = pytest.mark.slow


@pytest.fixture
def small_disk(tmp_path):
    """A mount factory: a tmpfs of the given size under tmp_path, unmounted after the test."""
    mounted = []

    def mount(size):
        where = tmp_path / f"disk-{size}"
        where.mkdir()
        if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                                                str(where)], capture_output=True).returncode != 0:
            pytest.skip("needs root to mount a small tmpfs (a disk that fills up for real)")
        mounted.append(where)
        return where
    yield mount
    for where in mounted:
        subprocess.run(["umount", "--lazy", str(where)], check=True)   # a pool worker may still exit


# 200k fills up in the first stage (numpy's .npz of the dedup bands: OSError ENOSPC, no file name);
# 8m while the shards are written (MindRecord's RuntimeError). 16m holds it all (measured).
@pytest.mark.parametrize("size, cause", [("200k", OSError), ("8m", RuntimeError)])
def test_a_full_disk_is_one_line_naming_the_cache(tmp_path, small_disk, size, cause):
    src = tmp_path / "src"
    src.mkdir()
    write_jsonl(src / "a.jsonl", paragraphs()[:300])
    cache = small_disk(size) / "cache"
    with pytest.raises(PretrainDataError) as err:
        prepare(data_cfg(cache, {"web": [src]}), progress=False)
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"data.cache_dir={cache}: the disk filled up")
    assert "point data.cache_dir (or PRETRAIN_CACHE) at a larger disk" in line
    assert isinstance(err.value.__context__, cause)    # the failure this case is about
    assert not any(p.name.startswith(".tmp") for p in cache.rglob("*"))   # nothing half-written kept
