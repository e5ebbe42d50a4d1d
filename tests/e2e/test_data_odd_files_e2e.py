"""Corpus files that are not plain files, and plain files that read wrong (issue 27, data items).

Before: a FIFO named .jsonl in a corpus dir hung data preparation forever with no output; a 10 GB
sparse .txt with 100 KB of text read holes for over 10 minutes; a symlinked subdirectory was skipped
without a word; a UTF-8 byte order mark dropped each jsonl file's first line as malformed_json; a
parquet text column of list<string> was counted as missing_field; `**` in a source glob was
recursive in the data step but not in the check before a launch, which refused a valid path.
"""
import os

import pytest
from tests.helpers.data_cli import cli_data
from tests.helpers.data_files import paragraphs, write_jsonl


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_in_a_corpus_dir_is_refused_in_one_line_not_a_hang(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    write_jsonl(corpus / "a.jsonl", paragraphs()[:50])
    os.mkfifo(corpus / "pipe.jsonl")
    proc = cli_data(tmp_path, "data.sources.general.paths=[corpus]", timeout=120)      # was: no output, forever
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "pipe.jsonl is a FIFO (named pipe), not a regular file" in err[0], err
    assert "Traceback" not in proc.stderr and not (tmp_path / "cache" / "datasets").exists()


@pytest.mark.slow   # 2.5-4 s: the default suite keeps under 5 minutes
def test_many_small_files_give_the_shards_one_task_per_file_gave(tmp_path, monkeypatch):
    from tests.helpers.data_files import data_cfg
    from pretrain.data import prepare, stages
    src = tmp_path / "src"
    src.mkdir()
    for i, text in enumerate(paragraphs()[:60]):
        (src / f"{i:04d}.txt").write_text(text)
    built = {}
    for group in (1, stages.GROUP_FILES):       # 1: a task per file, as before
        monkeypatch.setattr(stages, "GROUP_FILES", group)
        cache = tmp_path / f"cache{group}"
        p = prepare(data_cfg(cache, {"web": [src]}), progress=False)["web"]
        built[group] = ([s["sha256"] for s in p.manifest["train"]["shards"] + p.manifest["val"]["shards"]],
                        stages.counts["read"][0],
                        (next(cache.glob("clean/web-*")) / "docs.txt").read_bytes())
    (shards1, tasks1, docs1), (shards, tasks, docs) = built[1], built[stages.GROUP_FILES]
    assert (tasks1, tasks) == (60, 1)
    assert shards == shards1 and docs == docs1
