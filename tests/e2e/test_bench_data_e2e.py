"""The data benchmark's corpora (pretrain.data.corpora) and a smoke run of the benchmark itself."""

import pytest

from pretrain.data import corpora
from tests.helpers import cli


@pytest.mark.slow    # ~60 s: every kind end to end (tiny corpora), plus the memory table
def test_bench_data_quick_runs_every_kind(tmp_path, data_cache):
    proc = cli.run("--quick", "--scale", "1,2", "--scale-mb", "0.2", cwd=tmp_path, module="pretrain.bench.data",
                   cache=data_cache, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    for kind in corpora.KINDS:
        assert f"=== {kind}:" in out
    assert "local, dedup off" in out and "end to end / raw encode" in out
    # the floor row (encode, then MindSpore's MindRecord writer) ran for every kind, and heads the summary
    assert out.count("encode + MindRecord write (floor)") == len(corpora.KINDS) + 1
    assert "peak resident MB of a task's process" in out
    assert "near dedup: share of labelled near-copy pairs found" in out
    for kind in corpora.RECALL_KINDS:
        assert f"{kind:<10} >= 0.9" in out


@pytest.mark.slow    # builds the stdlib's prose model (~5 s)
def test_corpora_are_deterministic_and_short_docs_stay_under_1_kb():
    a, b = corpora.documents("short-dup", 0.2), corpora.documents("short-dup", 0.2)
    assert a == b
    assert max(len(d.encode()) for d in a) < 1024
    dups = len(a) - len(set(a))
    assert 0.3 < dups / len(a) < 0.6          # the exact copies (45%; a few drawn twice)
    long = corpora.documents("long-unique", 0.3)
    assert 3000 < sum(len(d.encode()) for d in long) / len(long) < 9000
