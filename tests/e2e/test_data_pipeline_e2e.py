"""prepare() and BatchLoader end to end on small real corpora written into tmp_path.

Text comes from the Python installation (the language reference that pydoc ships), the tokenizer
is a real sentencepiece model (small vocabulary), shards are real MindRecord files read back
through mindspore.dataset.MindDataset.
"""
import json
import os
import subprocess
import sys

import pytest

from tests.helpers.data_files import two_sources


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return two_sources(tmp_path_factory.mktemp("corpus"))


_WRITE_THEN_READ = """
import json, sys
from pathlib import Path
import numpy as np
from pretrain.data.pack import Rows
from pretrain.data.shards import ShardWriter, read_shard, shard_name
out = Path(sys.argv[1])
writer = ShardWriter(out, "train", 2, 5)
writer.write(Rows(np.arange(20, dtype=np.int32).reshape(4, 5), np.array([2, 3, 5, 1, 4, 5, 5], np.int32),
                  np.array([2, 1, 2, 2], np.int32)))
entries = writer.close()
loaded = "mindspore" in sys.modules
rows = [read_shard(out / shard_name("train", s, 2)) for s in range(2)]
print(json.dumps({"mindspore_while_writing": loaded, "rows": [e["rows"] for e in entries],
                  "ids": [r[0].tolist() for r in rows], "segs": [r[1].tolist() for r in rows]}))
"""


@pytest.mark.slow   # 3-5 s each; with the slow suite to keep the default one within 5 minutes (it took 396 s in CI)
def test_writing_shards_never_imports_mindspore(tmp_path):
    """The writer loads MindSpore's C++ MindRecord extension alone (pretrain.data.mindrecord_file),
    not mindspore (1.4-1.8 CPU-s a data build would pay); MindDataset reads the rows back, round-robin
    over the shards, each with its own pieces."""
    proc = subprocess.run([sys.executable, "-c", _WRITE_THEN_READ, str(tmp_path)], capture_output=True,
                          text=True, check=True)
    got = json.loads(proc.stdout.splitlines()[-1])
    assert got["mindspore_while_writing"] is False
    assert got["rows"] == [2, 2]
    assert got["ids"] == [[list(range(0, 5)), list(range(10, 15))], [list(range(5, 10)), list(range(15, 20))]]
    assert got["segs"] == [[2, 3, 1, 4], [5, 5, 5]]


# ---------------------------------------------------------------- CLI

@pytest.mark.slow   # moved out of the default suite's 5 minutes (still run by CI)
def test_cli_prepares_then_reuses_and_prints_a_summary(corpus, tmp_path):
    env = {**os.environ, "PRETRAIN_CACHE": str(tmp_path / "cache")}
    args = [sys.executable, "-m", "pretrain.data", "data=files",
            f"data.sources.general.paths=[{corpus['books'][0]}]", "~data.sources.reasoning",
            "~data.sources.anneal", "data.tokenizer.vocab_size=400",
            "data.tokenizer.byte_fallback=false", "model.seq_length=64"]
    runs = [subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
            for _ in range(2)]
    for proc, how in zip(runs, ("built", "reused")):
        assert proc.returncode == 0, proc.stderr[-2000:]
        line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("general "))
        assert line.split()[1] == "150" and f"{how}: {tmp_path / 'cache'}" in line


def test_cli_missing_input_path_is_one_line_and_exit_2(tmp_path):
    env = {**os.environ, "PRETRAIN_CACHE": str(tmp_path / "cache")}
    env.pop("HYDRA_FULL_ERROR", None)
    proc = subprocess.run([sys.executable, "-m", "pretrain.data", "data.sources.general.paths=[foo]"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: data.sources.general.paths: no such file or directory 'foo'")
    assert len(proc.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []                # nothing written: no run dir, no .hydra, no log
