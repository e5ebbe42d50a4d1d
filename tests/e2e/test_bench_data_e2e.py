"""The data benchmark's corpora (pretrain.data.corpora) and a smoke run of the benchmark itself."""
import subprocess
import sys

import pytest

from pretrain.data import corpora
from tests.helpers.cli import python_env


@pytest.mark.slow    # ~60 s: every kind end to end (tiny corpora), plus the memory table
def test_bench_data_quick_runs_every_kind(tmp_path, data_cache):
    proc = subprocess.run([sys.executable, "-m", "pretrain.bench.data", "--quick", "--scale", "1,2",
                           "--scale-mb", "0.2"], cwd=tmp_path, env=python_env(data_cache),
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    for kind in corpora.KINDS:
        assert f"=== {kind}:" in out
    assert "local, dedup off" in out and "end to end / raw encode" in out
    assert "peak resident MB of a task's process" in out
    assert "near dedup: share of labelled near-copy pairs found" in out
    for kind in corpora.RECALL_KINDS:
        assert f"{kind:<10} >= 0.9" in out
