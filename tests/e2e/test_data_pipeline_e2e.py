"""prepare() and BatchLoader end to end on small real corpora written into tmp_path.

Text comes from the Python installation (the language reference that pydoc ships), the tokenizer
is a real sentencepiece model (small vocabulary), shards are real MindRecord files read back
through mindspore.dataset.MindDataset.
"""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pretrain.config.errors import PretrainConfigError, PretrainDataError
from pretrain.data import prepare, stages
from pretrain.data.docstore import DocStore
from pretrain.data.loader import BatchLoader
from pretrain.data.pack import split_long
from tests.helpers import cli
from tests.helpers.data_files import SEQ, data_cfg, paragraphs, two_sources, write_jsonl
from tests.helpers.loader_shares import realised_shares


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return two_sources(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="module")
def prepared(corpus, tmp_path_factory):
    return prepare(data_cfg(tmp_path_factory.mktemp("cache"), corpus, num_shards=2), progress=False)


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
    args = ["data=files", f"data.sources.general.paths=[{corpus['books'][0]}]", "~data.sources.reasoning",
            "~data.sources.anneal", "data.tokenizer.vocab_size=400", "data.tokenizer.byte_fallback=false",
            "model.seq_length=64"]
    runs = [cli.run(*args, cwd=tmp_path, module="pretrain.data", timeout=300) for _ in range(2)]
    for proc, how in zip(runs, ("built", "reused")):
        assert proc.returncode == 0, proc.stderr[-2000:]
        line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("general "))
        assert line.split()[1] == "150" and f"{how}: {tmp_path / 'cache'}" in line


def test_cli_missing_input_path_is_one_line_and_exit_2(tmp_path):
    proc = cli.run("data.sources.general.paths=[foo]", cwd=tmp_path, module="pretrain.data", timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: data.sources.general.paths: no such file or directory 'foo'")
    assert len(proc.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []                # nothing written: no run dir, no .hydra, no log


def test_manifest_reconciles_and_records_the_build(prepared):
    for name, p in prepared.items():
        m = p.manifest
        d = m["documents"]
        assert d["in"] == d["kept"] + sum(d["dropped"].values()) == {"web": 400, "books": 150}[name]
        assert d["train"] + d["val"] == d["kept"] and d["val"] > 0
        assert m["train"]["tokens"] == sum(s["tokens"] for s in m["train"]["shards"])
        assert m["train"]["rows"] * (SEQ + 1) == m["train"]["tokens"] + m["train"]["padding_tokens"]
        assert [Path(s).name for s in p.train_shards] == [s["file"] for s in m["train"]["shards"]]
        assert len(p.train_shards) == 2
        assert all(s.is_file() and Path(f"{s}.db").is_file() for s in p.train_shards)
        assert m["tokenizer"]["eod_id"] == 1 and m["tokenizer"]["pad_id"] == 0
        assert m["keys"]["tokenizer_sha256"] == m["tokenizer"]["sha256"]


def test_minddataset_reads_back_exactly_the_tokens_written(prepared):
    """Every training document, encoded independently here, is found intact in the shards."""
    import sentencepiece as spm

    from pretrain.data.shards import read_shard
    p = prepared["web"]
    sp = spm.SentencePieceProcessor(model_file=str(p.tokenizer_path))
    store = DocStore(next(p.dir.parent.parent.glob("clean/web-*")))
    texts = [t for t, held in zip(store.texts(0, len(store)), store.held_out) if not held]
    expected = [ids + [1] for ids in sp.encode(texts)]
    flat = np.asarray(sum(expected, []), np.int32)
    starts, lens, _ = split_long(np.array([len(e) for e in expected]), SEQ + 1)
    want = sorted(tuple(flat[s:s + n].tolist()) for s, n in zip(starts, lens))
    got = []
    for shard in p.train_shards:
        ids, seg_lens, seg_off = read_shard(shard)
        for r in range(len(ids)):
            at = 0
            for n in seg_lens[seg_off[r]:seg_off[r + 1]].tolist():
                got.append(tuple(ids[r, at:at + n].tolist()))
                at += n
            assert (ids[r, at:] == 0).all()
    assert sorted(got) == want


def test_bad_input_is_counted_and_the_run_completes(tmp_path):
    good = paragraphs()[:40]
    src = tmp_path / "src"
    src.mkdir()
    write_jsonl(src / "good.jsonl", good)
    with open(src / "good.jsonl", "a") as f:
        f.write('{"text": "unterminated\n{"title": "no text field"}\n')
    (src / "bad.txt").write_bytes("é".encode("latin-1") * 200)
    (src / "binary.txt").write_bytes(bytes(range(256)) * 4)
    (src / "empty.jsonl").write_text("")
    (src / "lost.txt").symlink_to(tmp_path / "missing")
    words = " ".join(f"token{i * 7919 % 100003}" for i in range(30_000))      # one ~330 kB line
    (src / "huge.txt").write_text(words)
    write_jsonl(src / "huge.jsonl", [words[::-1]])                              # and as one jsonl record
    cfg = data_cfg(tmp_path / "cache", {"web": [src]}, **{"clean.max_chars": 40_000, "dedup.near": "false"})
    m = prepare(cfg, progress=False)["web"].manifest
    d = m["documents"]
    pieces = d["split_for_length"]["extra_pieces"] + 2
    assert d["split_for_length"]["documents"] == 2 and pieces >= 16
    assert d["in"] == len(good) + 2 + 4 + pieces
    assert d["dropped"] == {"malformed_json": 1, "missing_field": 1, "invalid_utf8": 1, "binary": 1,
                            "empty_file": 1, "unreadable": 1}
    assert d["in"] == d["kept"] + sum(d["dropped"].values())


def test_exact_and_planted_near_duplicates_are_removed(tmp_path):
    paras = paragraphs()[:120]
    base = paras[:100]
    victim = max(base, key=len)
    words = victim.split()
    near = " ".join(words[:len(words) // 2] + ["(edited)"] + words[len(words) // 2:])   # one word inserted
    exact = "  " + victim.upper() + " "                                                 # case/space only
    clean = prepare(data_cfg(tmp_path / "c1", {"web": [write_jsonl(tmp_path / "a.jsonl", base)]}),
                    progress=False)
    planted = write_jsonl(tmp_path / "b.jsonl", base + [near, exact])
    dirty = prepare(data_cfg(tmp_path / "c2", {"web": [planted]}), progress=False)
    d0, d1 = clean["web"].manifest["documents"], dirty["web"].manifest["documents"]
    assert d1["dropped"].get("exact_duplicate", 0) == d0["dropped"].get("exact_duplicate", 0) + 1
    assert d1["dropped"].get("near_duplicate", 0) == d0["dropped"].get("near_duplicate", 0) + 1
    assert d1["kept"] == d0["kept"]
    store = DocStore(next((tmp_path / "c2").glob("clean/web-*")))
    kept = store.texts(0, len(store))
    assert victim in kept and near not in kept


@pytest.mark.slow   # two data builds with workers: ~8 s
def test_compiled_dedup_keeps_the_same_documents(tmp_path, monkeypatch):
    """The read stage's compiled kernels (fasthash, used from stages.COMPILED_MIN_BYTES of input per worker)
    keep and drop exactly what the Python path does."""
    paras = paragraphs()[:120]
    texts = paras + [p.upper() for p in paras[:20]] + [p.replace(" the ", " a ", 1) for p in paras[20:40]]
    src = {"web": [write_jsonl(tmp_path / "a.jsonl", texts)]}
    plain = prepare(data_cfg(tmp_path / "c1", src), progress=False)["web"]
    monkeypatch.setattr(stages, "COMPILED_MIN_BYTES", 0)
    compiled = prepare(data_cfg(tmp_path / "c2", src), progress=False)["web"]
    assert plain.manifest["documents"] == compiled.manifest["documents"]
    assert plain.manifest["documents"]["dropped"]["near_duplicate"] > 0
    stores = [DocStore(next((tmp_path / c).glob("clean/web-*"))) for c in ("c1", "c2")]
    assert [s.texts(0, len(s)) for s in stores][0] == [s.texts(0, len(s)) for s in stores][1]
    assert [s["sha256"] for s in plain.manifest["train"]["shards"]] == \
           [s["sha256"] for s in compiled.manifest["train"]["shards"]]


@pytest.mark.slow   # 3-5 s each; with the slow suite to keep the default one within 5 minutes (it took 396 s in CI)
def test_more_partitions_for_a_larger_input_keep_the_same_documents(tmp_path, monkeypatch):
    """Partition counts follow the input size (stages.partitions): the same corpus cut into 8 or
    into 64 exact/near partitions keeps and drops the same documents."""
    assert stages.partitions(0) == 8 and stages.partitions(stages.PART_BYTES * 8 + 1) == 16
    paras = paragraphs()[:120]
    texts = paras + [p.upper() for p in paras[:20]] + [p.replace(" the ", " a ", 1) for p in paras[20:40]]
    src = {"web": [write_jsonl(tmp_path / "a.jsonl", texts)]}
    eight = prepare(data_cfg(tmp_path / "c1", src), progress=False)["web"]
    monkeypatch.setattr(stages, "PART_BYTES", (tmp_path / "a.jsonl").stat().st_size // 60)
    assert stages.partitions((tmp_path / "a.jsonl").stat().st_size) == 64
    many = prepare(data_cfg(tmp_path / "c2", src), progress=False)["web"]
    assert stages.counts["exact"] == (64, 0) and stages.counts["near"] == (64, 0)
    assert eight.manifest["documents"] == many.manifest["documents"]
    assert [s["sha256"] for s in eight.manifest["train"]["shards"]] == \
           [s["sha256"] for s in many.manifest["train"]["shards"]]


def test_second_prepare_reuses_and_a_config_change_rebuilds(corpus, prepared, tmp_path):
    cache = prepared["web"].dir.parent.parent
    again = prepare(data_cfg(cache, corpus, num_shards=2), progress=False)
    assert all(p.reused and p.dir == prepared[n].dir for n, p in again.items())
    other = prepare(data_cfg(cache, corpus, num_shards=1), progress=False)
    assert not other["web"].reused and other["web"].dir != prepared["web"].dir
    assert other["web"].manifest["keys"]["clean"] == prepared["web"].manifest["keys"]["clean"]  # stage reused


@pytest.mark.slow   # 3-5 s each; with the slow suite to keep the default one within 5 minutes (it took 396 s in CI)
def test_output_does_not_depend_on_the_number_of_workers(corpus, tmp_path, monkeypatch):
    from pretrain.data import docstore
    monkeypatch.setattr(docstore, "CHUNK_BYTES", 8192)        # many tokenize chunks and read splits,
    monkeypatch.setattr(stages, "SPLIT_BYTES", 4096)          # so workers really interleave
    streamed = []
    beside = stages._beside
    monkeypatch.setattr(stages, "_beside", lambda fn: (streamed.append(1), beside(fn))[1])
    one = prepare(data_cfg(tmp_path / "w1", {"web": corpus["web"]}, workers=1), progress=False)["web"]
    assert streamed == []
    # two workers and one shard: the writer streams beside the tokenize stage, the same bytes
    two = prepare(data_cfg(tmp_path / "w2", {"web": corpus["web"]}, workers=2), progress=False)["web"]
    assert streamed == [1]
    for split in ("train", "val"):
        assert one.manifest[split] == two.manifest[split]
        assert one.manifest[split]["truncated_documents"] > 0 or split == "val"


def test_a_row_not_of_the_schemas_dtypes_is_refused_not_written(tmp_path):
    from pretrain.data.mindrecord_file import CoreFile
    from pretrain.data.shards import SCHEMA
    f = CoreFile(tmp_path / "a.mindrecord", SCHEMA, "rows", 1 << 20, 1 << 20)
    with pytest.raises(TypeError, match=r"a row of \['int32', 'int64'\], the schema's fields are"):
        f.write([(np.arange(5, dtype=np.int32), np.array([5], np.int64))])
    with pytest.raises(TypeError):
        f.write([(np.arange(5, dtype=np.int32),)])


@pytest.mark.slow   # moved out of the default suite's 5 minutes (still run by CI)
def test_shards_are_byte_identical_to_mindrecords_own_writer(corpus, tmp_path, monkeypatch):
    from pretrain.data.shards import ShardWriter
    fast = prepare(data_cfg(tmp_path / "fast", {"books": corpus["books"]}), progress=False)["books"]
    monkeypatch.setattr(ShardWriter, "fast", False)           # every row through FileWriter.write_raw_data
    public = prepare(data_cfg(tmp_path / "public", {"books": corpus["books"]}), progress=False)["books"]
    for split in ("train", "val"):
        assert [(s["sha256"], s["index_sha256"]) for s in fast.manifest[split]["shards"]] == \
               [(s["sha256"], s["index_sha256"]) for s in public.manifest[split]["shards"]]


@pytest.mark.slow   # moved out of the default suite's 5 minutes (still run by CI)
def test_given_tokenizer_is_used_and_missing_one_is_an_error(corpus, prepared, tmp_path):
    tok = prepared["web"].tokenizer_path
    cfg = data_cfg(tmp_path / "c", {"books": corpus["books"]},
                   **{"tokenizer.path": str(tok), "tokenizer.train": "false"})
    p = prepare(cfg, progress=False)["books"]
    assert p.tokenizer_path == tok and not (tmp_path / "c" / "tokenizers").exists()
    with pytest.raises(PretrainConfigError, match="data.tokenizer.path: no such file 'nope.model'"):
        prepare(data_cfg(tmp_path / "c", corpus, **{"tokenizer.path": "nope.model"}), progress=False)


# ---------------------------------------------------------------- loader

def loader(prepared, weights=None, **kw):
    args = {"batch_size": 4, "seq_length": SEQ, "seed": 11, **kw}
    return BatchLoader(prepared, weights or {"web": 0.7, "books": 0.3}, **args)


def test_loader_is_deterministic_and_resumes_at_any_step(prepared):
    a, b = loader(prepared), loader(prepared)
    for _ in range(7):                                   # a has served steps 0..6 before step 7
        a.batch(_)
    for step in (7, 3, 120):
        x, y = a.batch(step), b.batch(step)
        assert all(np.array_equal(x[k], y[k]) for k in x)
    assert not np.array_equal(loader(prepared, seed=12).batch(7)["input_ids"], a.batch(7)["input_ids"])


def test_batch_layout_masks_padding_and_document_boundaries(prepared):
    b = loader(prepared, batch_size=16).batch(0)
    assert {k: v.shape for k, v in b.items()} == {k: (16, SEQ) for k in b}
    assert b["input_ids"].dtype == np.int32 and b["loss_mask"].dtype == np.float32
    keys = ("input_ids", "labels", "segment_ids", "position_ids", "loss_mask")
    ids, labels, seg, pos, mask = (b[k] for k in keys)
    assert np.array_equal(ids[:, 1:], labels[:, :-1])                        # labels are the next token
    starts = np.concatenate([np.ones((16, 1), bool), seg[:, 1:] != seg[:, :-1]], axis=1) & (seg > 0)
    assert (pos[starts] == 0).all() and (pos[~starts & (seg > 0)] > 0).all()
    assert (mask[seg == 0] == 0).all()                                       # nothing learned on padding
    eod = (ids == 1) & (seg > 0)
    assert (mask[eod] == 0).all()              # after EOD the label is another document's token
    assert (mask[(ids != 1) & (seg > 0)][:-1].mean()) > 0.95


def test_a_global_step_trains_the_same_rows_in_the_same_order_at_any_data_parallel_size(corpus, prepared):
    # The elastic rule (issue 14): a job that shrinks from dp 4 to 2 to 1, or a dp2 run resumed with
    # parallel=single, neither repeats nor skips a sample: global step k is the same rows, in order
    # (every rank reads rows from all shards by global index; data.num_shards does not follow dp).
    for names in ({"web": 0.7, "books": 0.3}, {"books": 1.0}):
        one = loader(prepared, weights=names, batch_size=8)
        for dp in (2, 4):
            ranks = [loader(prepared, weights=names, dp_rank=r, dp_size=dp, batch_size=8 // dp)
                     for r in range(dp)]
            for step in (0, 1, 7, 40):
                split = np.concatenate([ld.batch(step)["input_ids"] for ld in ranks])
                assert np.array_equal(split, one.batch(step)["input_ids"]), (names, dp, step)
    # within an epoch the ranks of one step never share a row
    n = len(loader(prepared, weights={"books": 1.0}).views[0])
    two = [loader(prepared, weights={"books": 1.0}, dp_rank=r, dp_size=2, batch_size=1) for r in range(2)]
    seen = [{ld.batch(s)["input_ids"][0].tobytes() for s in range(n // 2)} for ld in two]
    assert not seen[0] & seen[1] and len(seen[0] | seen[1]) == 2 * (n // 2)


def test_an_epoch_visits_every_row_once(prepared):
    ld = loader(prepared, weights={"books": 1.0}, batch_size=1)
    n = len(ld.views[0])
    seen = [ld.batch(s)["input_ids"][0].tobytes() for s in range(n)]
    assert len(set(seen)) == n
    assert ld.batch(n)["input_ids"][0].tobytes() in set(seen)      # the next epoch, reshuffled


def test_realised_shares_follow_the_weights(prepared):
    ld = loader(prepared, weights={"web": 0.8, "books": 0.2}, batch_size=8)
    shares = realised_shares(ld, 500)
    assert abs(shares["web"] - 0.8) < 0.03 and abs(sum(shares.values()) - 1) < 1e-9
    assert realised_shares(ld, range(10, 20)) != realised_shares(ld, range(0, 10))


def test_val_split_is_disjoint_from_train(prepared):
    val = loader(prepared, split="val", weights={"web": 1.0}, batch_size=2)
    train_rows = {r.tobytes() for s in prepared["web"].train_shards for r in _rows(s)}
    assert all(val.batch(s)["input_ids"][i].tobytes() not in train_rows for s in range(5) for i in range(2))


def _rows(shard):
    from pretrain.data.shards import read_shard
    ids, _, _ = read_shard(shard)
    return ids[:, :-1]


def test_loader_cache_equals_what_minddataset_reads(prepared):
    from pretrain.data.loader import ShardRows
    from pretrain.data.shards import read_shard
    p = prepared["web"]
    for path, info in zip(p.train_shards, p.manifest["train"]["shards"]):
        cached = ShardRows(path, info["sha256"], info["rows"], SEQ + 1)     # memory-mapped .npy by now
        assert isinstance(cached.ids, np.memmap)
        ids, seg_lens, seg_off = read_shard(path)
        assert np.array_equal(cached.ids, ids) and np.array_equal(cached.seg_lens, seg_lens)
        assert np.array_equal(cached.seg_off, seg_off) and cached.row_tokens.sum() == info["tokens"]


def test_loader_errors_name_the_problem(prepared):
    with pytest.raises(PretrainDataError, match=r"mix names \['wiki'\]"):
        loader(prepared, weights={"wiki": 1.0})
    with pytest.raises(PretrainDataError, match="seq_length 64"):
        loader(prepared, seq_length=128)


@pytest.mark.slow
def test_a_100_mb_single_line_document_is_split_and_prepared(tmp_path, prepared):
    rng = np.random.default_rng(0)
    vocab = np.array([f"w{i}" for i in range(50_000)])
    src = tmp_path / "src"
    src.mkdir()
    with open(src / "one_line.txt", "w") as f:
        while f.tell() < 100 * 2**20:
            f.write(" ".join(vocab[rng.integers(0, len(vocab), 200_000)]) + " ")
    size = (src / "one_line.txt").stat().st_size
    cfg = data_cfg(tmp_path / "cache", {"web": [src]}, workers=2,
                   **{"tokenizer.path": str(prepared["web"].tokenizer_path)})
    m = prepare(cfg, progress=False)["web"].manifest
    d = m["documents"]
    assert d["split_for_length"]["documents"] == 1
    assert d["in"] == d["split_for_length"]["extra_pieces"] + 1 >= size // cfg.clean.max_chars
    assert d["in"] == d["kept"] + sum(d["dropped"].values()) and d["kept"] >= d["in"] - 1
    assert m["train"]["tokens"] > 10_000_000


@pytest.mark.slow   # moved out of the default suite's 5 minutes (still run by CI)
def test_a_corpus_too_small_for_the_vocabulary_is_refused_not_shrunk(corpus, tmp_path):
    """sentencepiece stops early on a small corpus (hard_vocab_limit=false): the run must not go on
    with fewer pieces than model.vocab_size says, and no such tokenizer is cached."""
    cfg = data_cfg(tmp_path / "c", {"books": corpus["books"]}, **{"tokenizer.vocab_size": "20000"})
    with pytest.raises(PretrainDataError, match=r"data.tokenizer.vocab_size=20000: .* yield only \d+ pieces; "
                                                r"set model.vocab_size=\d+"):
        prepare(cfg, progress=False)
    assert not any((tmp_path / "c" / "tokenizers").glob("*/tokenizer.model"))


def test_shards_too_large_for_the_writers_memory_name_the_count_to_set(corpus, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(stages, "SHARD_WARN_BYTES", 10_000)
    prepare(data_cfg(tmp_path / "c", {"books": corpus["books"]}, num_shards=2), progress=False)
    err = capsys.readouterr().err
    assert "warning: data.num_shards=2 makes shards of" in err and "set data.num_shards >= " in err
    assert int(err.split("set data.num_shards >= ")[1].split()[0]) > 2
    monkeypatch.setattr(stages, "SHARD_WARN_BYTES", 1 << 40)
    prepare(data_cfg(tmp_path / "c2", {"books": corpus["books"]}, num_shards=2), progress=False)
    assert "warning" not in capsys.readouterr().err
