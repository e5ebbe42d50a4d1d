"""Corpus files that are not plain files, and plain files that read wrong (issue 27, data items).

Before: a FIFO named .jsonl in a corpus dir hung data preparation forever with no output; a 10 GB
sparse .txt with 100 KB of text read holes for over 10 minutes; a symlinked subdirectory was skipped
without a word; a UTF-8 byte order mark dropped each jsonl file's first line as malformed_json; a
parquet text column of list<string> was counted as missing_field; `**` in a source glob was
recursive in the data step but not in the check before a launch, which refused a valid path.
"""
import json
import os
from pathlib import Path

import pytest

from pretrain.config import validate
from pretrain.config.errors import PretrainDataError
from pretrain.data.sources import Doc, Drop, read_documents, resolve_files
from tests.helpers.data_files import paragraphs, write_jsonl

PROSE = ["first document, plain prose", "second document, plain prose", "third document, plain prose"]


def test_a_mostly_sparse_file_is_refused_at_once(tmp_path):
    big = tmp_path / "big.txt"
    with open(big, "wb") as f:          # 100 KB of text, then a 10 GB hole (no disk used)
        f.write(" ".join(paragraphs()).encode()[:100_000])
        f.truncate(10 << 30)
    if os.stat(big).st_blocks * 512 >= big.stat().st_size:
        pytest.skip("this file system stores no holes")
    with pytest.raises(PretrainDataError, match=r"big\.txt is a sparse file: 10,737,418,240 bytes of which"):
        resolve_files("general", [str(tmp_path)])       # was: a read of 10 GB of NUL bytes


def test_a_small_hole_is_not_a_sparse_file(tmp_path):
    f = tmp_path / "a.txt"
    with open(f, "wb") as out:
        out.write(PROSE[0].encode())
        out.truncate(64 << 10)
    assert resolve_files("general", [str(tmp_path)]) == [f]


def test_a_symlinked_subdirectory_is_read_and_a_link_loop_once(tmp_path):
    corpus, elsewhere = tmp_path / "corpus", tmp_path / "elsewhere"
    (corpus / "own").mkdir(parents=True)
    elsewhere.mkdir()
    write_jsonl(corpus / "own" / "a.jsonl", PROSE[:1])
    write_jsonl(elsewhere / "b.jsonl", PROSE[1:])
    (corpus / "linked").symlink_to(elsewhere, target_is_directory=True)
    (corpus / "own" / "loop").symlink_to(corpus, target_is_directory=True)   # back to the top
    files = resolve_files("general", [str(corpus)])
    assert files == [corpus / "linked" / "b.jsonl", corpus / "own" / "a.jsonl"]   # was: own/a.jsonl only
    assert [d.text for d in read_documents(files, "text", 10_000)] == [PROSE[1], PROSE[2], PROSE[0]]


def test_a_byte_order_mark_is_not_a_malformed_line(tmp_path):
    jsonl, txt = tmp_path / "bom.jsonl", tmp_path / "bom.txt"
    jsonl.write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps({"text": t}) + "\n" for t in PROSE).encode())
    txt.write_bytes(b"\xef\xbb\xbf" + PROSE[0].encode())
    items = list(read_documents([jsonl, txt], "text", 10_000))
    assert all(isinstance(i, Doc) for i in items), items            # was: Drop("malformed_json") first
    assert [i.text for i in items] == [*PROSE, PROSE[0]]             # the .txt's text without "\ufeff"


def test_a_parquet_list_column_is_dropped_under_its_type(tmp_path):
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "lists.parquet"
    pq.write_table(pa.table({"text": pa.array([["a", "b"], ["c"], None], pa.list_(pa.string()))}), path)
    items = list(read_documents([path], "text", 10_000))
    assert [i.reason for i in items] == ["not_a_string:list<string>"] * 2 + ["missing_field"]
    assert all(isinstance(i, Drop) for i in items)                   # was: missing_field x 3


def test_a_recursive_glob_is_one_rule_for_the_check_and_the_data_step(tmp_path, compose_many, monkeypatch):
    deep = tmp_path / "corpus" / "a" / "b"
    deep.mkdir(parents=True)
    write_jsonl(deep / "x.jsonl", PROSE)
    write_jsonl(tmp_path / "corpus" / "top.jsonl", PROSE)
    monkeypatch.chdir(tmp_path)
    glob = "corpus/**/*.jsonl"
    cfg = compose_many(["data=files", f"data.sources.general.paths=[{glob}]", "~data.sources.reasoning",
                        "~data.sources.anneal"])
    assert validate.missing_files(cfg.data) == []                    # was: "no such file or directory"
    assert resolve_files("general", [glob]) == [Path("corpus/a/b/x.jsonl"), Path("corpus/top.jsonl")]
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    (home / "c").mkdir(parents=True)
    write_jsonl(home / "c" / "y.jsonl", PROSE)
    cfg = compose_many(["data=files", "data.sources.general.paths=['~/c']", "~data.sources.reasoning",
                        "~data.sources.anneal"])
    assert validate.missing_files(cfg.data) == []
    assert resolve_files("general", ["~/c"]) == [home / "c" / "y.jsonl"]


# ---------------------------------------------------------------- many small files (issue 40 item 6)

def test_small_files_are_read_in_groups_that_depend_on_the_files_only(tmp_path, monkeypatch):
    from pretrain.data import stages
    small = []
    for i in range(10):
        small.append(tmp_path / f"s{i}.txt")
        small[-1].write_text("x" * 300)
    big_jsonl = write_jsonl(tmp_path / "t-big.jsonl", ["y" * 1000] * 3000)           # ~3 MB
    utf16 = tmp_path / "u-big.jsonl"
    utf16.write_bytes(b"\xff\xfe" + ('{"text": "z"}\n' * 200_000).encode("utf-16-le"))  # lines are not bytes
    files = small[:4] + [big_jsonl, utf16] + small[4:]
    monkeypatch.setattr(stages, "GROUP_FILES", 3)
    splits = stages._splits(files, "general")
    split = min(stages.SPLIT_BYTES, max(stages.MIN_SPLIT_BYTES, sum(f.stat().st_size for f in files) // 16))
    ranges = -(-big_jsonl.stat().st_size // split)
    assert [(len(f), b, r is not None) for f, b, r in splits] == (
        [(0, "general", False), (3, None, False), (1, None, False)] + [(1, None, True)] * ranges
        + [(1, None, False), (3, None, False), (3, None, False)])          # was: one task per file
    assert [p for f, _, r in splits for p in f if r is None or r[0] == 0] == [str(f) for f in files]
