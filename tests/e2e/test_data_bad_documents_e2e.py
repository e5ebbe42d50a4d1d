"""One bad document never stops or shrinks a build; no error leaves a temp directory behind.

Reproduces issue 12 items 4 and 7 (data): a lone surrogate in one jsonl line aborted the whole
preparation with UnicodeEncodeError and left a temp dir; one NUL byte on line 2 of a 100-line
jsonl dropped all 100 documents as "binary"; data.dedup.num_perm=0 ended in a datasketch
traceback and a temp dir; a source whose every document was dropped said "no val rows".
"""
import json
import sys

import pytest

from pretrain.data import prepare
from tests.helpers.data_cli import cli_data, temp_dirs
from tests.helpers.data_files import data_cfg, jsonl_with_one_bad_line, paragraphs
from tests.helpers.fuzz_corpus import words, write_fuzz_corpus


@pytest.mark.slow   # moved out of the default suite's 5 minutes (still run by CI)
def test_cli_prepares_a_source_with_a_surrogate_and_a_nul_line(tmp_path):
    texts = paragraphs()[:100]
    src = tmp_path / "src"
    src.mkdir()
    jsonl_with_one_bad_line(src / "s.jsonl", texts[:50], b'{"text": "\\ud800 abc"}')
    raw = json.dumps({"text": texts[51]}).encode()
    jsonl_with_one_bad_line(src / "n.jsonl", texts[50:], raw[:30] + b"\0" + raw[30:])
    proc = cli_data(tmp_path, f"data.sources.general.paths=[{src}]")
    assert proc.returncode == 0, proc.stderr[-2000:]
    row = next(ln for ln in proc.stdout.splitlines() if ln.startswith("general "))
    assert row.split()[1] == "100" and "invalid_unicode 1" in proc.stdout
    assert temp_dirs(tmp_path / "cache") == []


# ---------------------------------------------------------------- errors: one line, no temp dir

def test_a_source_with_every_document_dropped_says_so_in_one_line(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for i in range(3):
        (src / f"{i}.txt").write_bytes(b"\x7fELF" + b"\0" * 100)
    proc = cli_data(tmp_path, f"data.sources.general.paths=[{src}]")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.splitlines() == [
        "error: 0 of 3 documents kept from general: 3 binary (check data.sources.general and the filters "
        "data.clean.*, data.dedup.*)"]
    assert temp_dirs(tmp_path / "cache") == []


def test_dedup_num_perm_0_is_one_line_and_leaves_no_temp_dir(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in paragraphs()[:20]))
    proc = cli_data(tmp_path, f"data.sources.general.paths=[{src}]", "data.dedup.num_perm=0")
    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) == 1 and proc.stderr.startswith("error: ")
    assert "num_perm" in proc.stderr and "Traceback" not in proc.stderr
    assert temp_dirs(tmp_path / "cache") == []


def test_fuzzed_corpus_prepares_end_to_end(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for seed in range(3):
        d = src / f"s{seed}"
        d.mkdir()
        write_fuzz_corpus(d, 100 + seed, words())
    (src / "good.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in paragraphs()[:150]))
    cfg = data_cfg(tmp_path / "cache", {"web": [src]}, workers=2)
    m = prepare(cfg, progress=False)["web"].manifest
    d = m["documents"]
    assert d["in"] == d["kept"] + sum(d["dropped"].values()) and d["kept"] >= 150
    assert m["train"]["rows"] > 0
    assert temp_dirs(tmp_path / "cache") == []


@pytest.mark.parametrize("stage", ["pretrain.data.stages.clean_store", "pretrain.data.stages._read_split",
                                   "pretrain.data.tokenizer.train", "pretrain.data.stages.build_dataset",
                                   "pretrain.data.stages._write_shard"])
def test_an_error_in_any_stage_leaves_no_temp_dir(tmp_path, monkeypatch, stage):
    module, name = stage.rsplit(".", 1)

    def boom(*a, **k):
        raise RuntimeError("disk on fire")
    monkeypatch.setattr(sys.modules[module] if module in sys.modules else __import__(module, fromlist=[name]),
                        name, boom)
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in paragraphs()[:60]))
    with pytest.raises(RuntimeError, match="disk on fire"):
        prepare(data_cfg(tmp_path / "cache", {"web": [src]}), progress=False)
    assert temp_dirs(tmp_path / "cache") == []
