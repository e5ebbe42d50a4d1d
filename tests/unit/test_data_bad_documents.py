"""One bad document never stops or shrinks a build; no error leaves a temp directory behind.

Reproduces issue 12 items 4 and 7 (data): a lone surrogate in one jsonl line aborted the whole
preparation with UnicodeEncodeError and left a temp dir; one NUL byte on line 2 of a 100-line
jsonl dropped all 100 documents as "binary"; data.dedup.num_perm=0 ended in a datasketch
traceback and a temp dir; a source whose every document was dropped said "no val rows".
"""
import gzip
import json
import random
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import zstandard

from pretrain.data import prepare, stages
from pretrain.data.engine import LocalEngine
from pretrain.data.sources import Doc, Drop, read_documents
from tests.helpers.data_cli import temp_dirs
from tests.helpers.data_files import data_cfg, jsonl_with_one_bad_line, paragraphs

CLEAN = {"normalize": "NFC", "min_chars": 1, "max_chars": 4000, "max_symbol_ratio": 0.9,
         "max_repeated_line_fraction": 1.0}
PROSE3 = ["first document, plain prose", "second", "third document, plain prose"]
DEDUP = {"exact": True, "near": True, "threshold": 0.8, "num_perm": 32, "shingle": 3}


def test_a_lone_surrogate_drops_only_its_document(tmp_path):
    texts = paragraphs()[:100]
    src = jsonl_with_one_bad_line(tmp_path / "s.jsonl", texts, b'{"text": "\\ud800 abc"}')
    items = list(read_documents([src], "text", 10_000))
    assert [i.reason for i in items if isinstance(i, Drop)] == ["invalid_unicode"]
    assert len([i for i in items if isinstance(i, Doc)]) == 99


def test_a_nul_byte_on_line_2_keeps_every_document(tmp_path):
    texts = paragraphs()[:100]
    raw = json.dumps({"text": texts[1]}).encode()
    src = jsonl_with_one_bad_line(tmp_path / "n.jsonl", texts, raw[:30] + b"\0" + raw[30:])
    items = list(read_documents([src], "text", 10_000))
    assert all(isinstance(i, Doc) for i in items) and len(items) == 100      # was: Drop("binary") x 1
    assert "\0" in items[1].text                                               # the cleaner removes it


def test_a_line_nested_too_deep_for_json_is_malformed_not_a_crash(tmp_path):
    src = jsonl_with_one_bad_line(tmp_path / "d.jsonl", PROSE3, b"[" * 100_000 + b"]" * 100_000)
    items = list(read_documents([src], "text", 10_000))                # was: RecursionError
    assert [i.reason if isinstance(i, Drop) else "doc" for i in items] == ["doc", "malformed_json", "doc"]


def test_a_real_binary_file_is_still_dropped_whole(tmp_path):
    (tmp_path / "x.jsonl").write_bytes(_random_bytes(random.Random(0), 5000))
    (tmp_path / "y.txt").write_bytes(b"\x7fELF\x02\x01\x01" + b"\0" * 200)
    for f in ("x.jsonl", "y.txt"):
        assert [i.reason for i in read_documents([tmp_path / f], "text", 10_000)] == ["binary"]


# ---------------------------------------------------------------- fuzz

_ODD = ["\ud800", "\udfff", "\udc80x", "\0", "\x01", "\x07", "\x1b[31m", "\x7f", "\x85", "\x9f", "\u200e",
        "\u200f", "\u202e", "\u2066", "\u2069", "\ufeff", "\ufffd", "\uffff", "\U0010ffff", "\ue000",
        "e\u0301", "\U0001f600", "\u4e2d\u6587", "\r", "\r\n", "\t", "\u2028", " "]


def _random_text(rng: random.Random, words) -> str:
    out = []
    for _ in range(rng.randrange(1, 60)):
        out.append(rng.choice(_ODD) if rng.random() < 0.3 else rng.choice(words))
        out.append(" " if rng.random() < 0.8 else "")
    return "".join(out)


def _random_bytes(rng: random.Random, n: int) -> bytes:
    return bytes(rng.randrange(256) for _ in range(n))


def _write_fuzz_corpus(d: Path, seed: int, words) -> None:
    """Every reader (txt, jsonl, parquet), plain, .gz and .zst, fed random unicode (surrogates,
    NUL, control characters, bidi marks) and random bytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    rng = random.Random(seed)
    texts = [_random_text(rng, words) for _ in range(30)]
    enc = [t.encode("utf-8", "surrogatepass") for t in texts]
    lines = []
    for t, b in zip(texts, enc):
        r = rng.random()
        lines.append(json.dumps({"text": t}).encode() if r < 0.5 else           # surrogates as \\ud800
                     b'{"text": "' + b.replace(b"\\", b"").replace(b'"', b"") + b'"}' if r < 0.8 else
                     _random_bytes(rng, rng.randrange(1, 80)))
    files = {
        "a.jsonl": b"\n".join(lines) + b"\n",
        "b.txt": rng.choice(enc),
        "c.txt": _random_bytes(rng, 3000),
        "d.jsonl": _random_bytes(rng, 3000),
        "e.parquet": _random_bytes(rng, 500),
    }
    for name, data in list(files.items()):
        files[name + ".gz"] = gzip.compress(data)
        files[name + ".zst"] = zstandard.ZstdCompressor().compress(data)
    files["f.jsonl.gz"] = _random_bytes(rng, 300)          # not gzip at all
    files["g.txt.zst"] = _random_bytes(rng, 300)
    for name, data in files.items():
        (d / name).write_bytes(data)
    rows = enc + [_random_bytes(rng, 40) for _ in range(10)] + [None]
    column = pa.array(rows, pa.binary()).view(pa.string())       # no UTF-8 check: bad rows get written
    pq.write_table(pa.table({"text": column}), d / "h.parquet")
    (d / "h.parquet.zst").write_bytes(zstandard.ZstdCompressor().compress((d / "h.parquet").read_bytes()))
    (d / "h.parquet.gz").write_bytes(gzip.compress((d / "h.parquet").read_bytes()))


def _words():
    return " ".join(paragraphs()[:20]).split()


@pytest.mark.parametrize("seed", range(6))
def test_fuzzed_inputs_are_all_accounted_for(tmp_path, seed):
    src, out, work = tmp_path / "src", tmp_path / "store", tmp_path / "work"
    src.mkdir()
    _write_fuzz_corpus(src, seed, _words())
    files = sorted(src.iterdir())
    source = SimpleNamespace(files=files, builtin=None, text_field="text")     # the read stage's path
    stats = stages.clean_store(source, SimpleNamespace(clean=CLEAN, dedup=DEDUP, val_fraction=0.1), out, work,
                               LocalEngine(1), dict)
    assert stats["in"] == stats["kept"] + sum(stats["dropped"].values()) > 0
    assert stats["in"] >= len(files)
    assert {"invalid_unicode", "binary", "unreadable"} <= set(stats["dropped"])
    from pretrain.data.docstore import DocStore
    store = DocStore(out)
    assert len(store) == stats["kept"] and len(store.texts(0, len(store))) == stats["kept"]
    assert sorted(p.name for p in out.iterdir()) == ["docs.end", "docs.txt", "docs.val"]
    left = {p.name for p in (work / "read").glob("*/*")}      # no unpacked parquet left in a task's output
    assert left <= {"docs.txt", "docs.end", "docs.val", "chars.npy", "done.json",
                    *(f"exact-{c}.npy" for c in ("index", "digest", "offsets")),
                    *(f"band-{c}.npy" for c in ("index", "band", "key", "offsets"))}, left


def test_fuzzed_corpus_prepares_end_to_end(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for seed in range(3):
        d = src / f"s{seed}"
        d.mkdir()
        _write_fuzz_corpus(d, 100 + seed, _words())
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
