"""Data pipeline parts in isolation: readers, cleaning, dedup, packing, mixture, sample corpus.

No mindspore here; everything runs in well under a second per test.
"""
import gzip
import json
import random
import re
import time
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from pretrain.config.errors import PretrainDataError
from pretrain.data import sample
from pretrain.data.clean import Cleaner, repeated_line_fraction, symbol_ratio
from pretrain.data.dedup import MinHasher, band_keys
from pretrain.data.hashing import dedup_words, is_validation, words_digest
from pretrain.data.mixture import MixtureSchedule, apportion
from pretrain.data.pack import ConcatPacker, Docs, best_fit_decreasing, pack_best_fit
from pretrain.data.sources import Doc, Drop, read_documents, resolve_files, split_text
from tests.helpers.data_files import paragraphs

PROSE = [
    "The quick brown fox jumps over the lazy dog while the farmer watches from the porch.",
    "Packing documents into fixed windows without cutting them keeps each example whole.",
    "A held-out split chosen by document hash stays the same no matter how often you rerun.",
]


def _docs_from_lengths(lens, rng):
    tokens = [rng.integers(4, 1000, size=n - 1).tolist() + [1] for n in lens]   # EOD = 1
    return Docs(np.asarray(sum(tokens, []), np.int32), np.asarray(lens, np.int32)), tokens


# ---------------------------------------------------------------- read

def _write_all_formats(d: Path, texts):
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zstandard
    lines = "".join(json.dumps({"text": t, "id": i}) + "\n" for i, t in enumerate(texts)).encode()
    (d / "a.jsonl").write_bytes(lines)
    (d / "b.jsonl.gz").write_bytes(gzip.compress(lines))
    (d / "c.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(lines))
    pq.write_table(pa.table({"text": texts}), d / "d.parquet")
    (d / "e.parquet.zst").write_bytes(zstandard.ZstdCompressor().compress((d / "d.parquet").read_bytes()))
    for i, t in enumerate(texts):
        (d / f"f{i}.txt.gz").write_bytes(gzip.compress(t.encode()))


def test_every_format_and_compression_reads_the_same_documents(tmp_path):
    _write_all_formats(tmp_path, PROSE)
    files = resolve_files("web", [str(tmp_path)])
    assert len(files) == 5 + len(PROSE)
    for f in files:
        if ".txt" in f.name:
            continue
        docs = list(read_documents([f], "text", 10_000))
        assert [d.text for d in docs] == PROSE, f.name
    txt = [d.text for d in read_documents([f for f in files if ".txt" in f.name], "text", 10_000)]
    assert txt == PROSE


def test_bad_inputs_are_dropped_with_their_reason(tmp_path):
    (tmp_path / "good.jsonl").write_text(
        json.dumps({"text": PROSE[0]}) + "\n{not json\n" + json.dumps({"body": "x"}) + "\n"
        + json.dumps({"text": 7}) + "\n" + "\n")
    (tmp_path / "latin1.jsonl").write_bytes(b'{"text": "caf\xe9"}\n')
    (tmp_path / "bad.txt").write_bytes(b"valid start \xff\xfe invalid")
    (tmp_path / "bin.txt").write_bytes(b"\x7fELF\x00\x00\x01")
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "gone.txt").symlink_to(tmp_path / "nowhere")
    (tmp_path / "cut.jsonl.gz").write_bytes(gzip.compress(b'{"text": "a"}\n' * 1000)[:40])
    (tmp_path / "nofield.parquet").write_bytes(b"PAR1 this is not parquet")
    items = list(read_documents(resolve_files("web", [str(tmp_path)]), "text", 10_000))
    reasons = sorted(i.reason for i in items if isinstance(i, Drop))
    assert reasons == sorted(["malformed_json", "missing_field", "missing_field", "invalid_utf8",
                              "invalid_utf8", "binary", "empty_file", "unreadable", "unreadable",
                              "unreadable"])
    assert [i.text for i in items if isinstance(i, Doc)] == [PROSE[0]]


def test_huge_single_line_document_is_split_not_dropped(tmp_path):
    rng = random.Random(0)
    words = [f"w{rng.randrange(10**6)}" for _ in range(60_000)]     # one ~500 kB line
    (tmp_path / "huge.txt").write_text(" ".join(words))
    pieces = list(read_documents([tmp_path / "huge.txt"], "text", 50_000))
    assert len(pieces) > 9 and all(isinstance(p, Doc) and len(p.text) <= 50_000 for p in pieces)
    assert "".join(p.text for p in pieces) == " ".join(words)
    assert [p.part for p in pieces] == list(range(len(pieces)))
    assert len({p.key for p in pieces}) == 1          # all pieces land in the same split


def test_split_text_cuts_at_whitespace_and_loses_nothing():
    text = ("alpha beta gamma\n" * 50)
    pieces = split_text(text, 100)
    assert "".join(pieces) == text and all(len(p) <= 100 for p in pieces)
    assert all(p.endswith(("\n", " ")) for p in pieces[:-1])


def test_missing_paths_are_one_line_errors(tmp_path):
    with pytest.raises(PretrainDataError, match=r"data.sources.web.paths: no such file 'nope/\*.jsonl'"):
        resolve_files("web", ["nope/*.jsonl"])
    (tmp_path / "notes.md").write_text("x")
    with pytest.raises(PretrainDataError, match="no corpus files under"):
        resolve_files("web", [str(tmp_path)])


# ---------------------------------------------------------------- clean and dedup

def _clean_cfg(**kw):
    base = dict(normalize="NFC", min_chars=20, max_chars=10_000, max_symbol_ratio=0.3,
                max_repeated_line_fraction=0.5)
    return SimpleNamespace(**{**base, **kw})


def test_cleaner_normalises_and_filters():
    clean = Cleaner(_clean_cfg())
    text, reason = clean("Cafe\u0301 au lait\x00\x07 is\r\nserved   \n\n\n\nhot and fresh.\ufeff")
    assert reason is None and text == "Café au lait is\nserved\n\nhot and fresh."
    assert clean("too short")[1] == "too_short"
    assert clean("{}[]<>|~^%$#@!&*" * 4 + " words")[1] == "symbol_ratio"
    assert clean("same line here\n" * 5 + "another line")[1] == "repeated_lines"
    assert symbol_ratio("def f(x):\n    return x + 1") < 0.3
    assert repeated_line_fraction("a\nb\na\n\n\nb") == 0.5


def test_dedup_keys_tell_exact_and_near_duplicates_only():
    """What the read stage shuffles: equal words digests for an exact duplicate (case, spacing), a
    shared LSH band key for a near one (one word of 240 changed), neither for another text."""
    from pretrain.data.dedup import lsh_params
    base = " ".join(f"word{i} filler{i % 7}" for i in range(120))
    near = base.replace("word60 ", "changed60 ")
    other = " ".join(f"other{i} text{i % 5}" for i in range(120))
    dedup = dict(exact=True, near=True, threshold=0.8, num_perm=128, shingle=5)
    lsh = lsh_params(dedup)
    hasher, bands, width = MinHasher(128, 5, (lsh["a"], lsh["b"])), lsh["bands"], lsh["width"]

    def keys(text):
        words = dedup_words(text)
        found = band_keys(hasher.signature(words)[None, :], bands, width)[0]
        return words_digest(words), set(enumerate(found))
    (digest, bucket), (dup_digest, _), (near_digest, near_bucket), (other_digest, other_bucket) = \
        map(keys, (base, base.upper().replace(" ", "  ") + " !", near, other))
    assert dup_digest == digest and near_digest != digest and other_digest != digest
    assert bucket & near_bucket and not bucket & other_bucket


def _texts_of_every_kind():
    rng = np.random.default_rng(0)
    vocab = ["the", "Über", "naïve", "日本語", "x", "__init__", "a_b", "ß", "data", "2024", "£5", "def",
             "中文", "训练模型", "，", "。", "GPU加速", "ภาษาไทย", "カタカナ", "한국어", "𠀀𠀁", "々"]
    texts = [" ".join(rng.choice(vocab, size=int(rng.integers(0, 400)))) for _ in range(60)]
    texts += ["".join(rng.choice(vocab, size=int(rng.integers(0, 200)))) for _ in range(20)]
    texts += ["", "one", "a b c d", "a b c d e", "word " * 5000, "\t\x1c\x1f\x0b text !! ** ",
              "{}[]<>|~^%$#@!&*" * 4]
    return texts + [chr(c) * 3 + " ok" for c in range(160)] + paragraphs()[:30]


def test_minhash_signatures_are_datasketchs_bit_for_bit():
    """MinHasher computes datasketch's MinHash (crc32 shingles, seed 1) with array operations: the same
    uint32 values for any text (non-ASCII words, fewer words than a shingle, none at all)."""
    import zlib

    from datasketch import MinHash
    from pretrain.data.hashing import unit_spans
    for num_perm, n in ((128, 5), (16, 1), (16, 3)):
        hasher = MinHasher(num_perm, n)
        for text in _texts_of_every_kind():
            words = dedup_words(text)
            joined = " ".join(words)
            spans = unit_spans(joined) or [(0, 0)]
            ref = MinHash(num_perm=num_perm, seed=1, hashfunc=zlib.crc32)
            ref.update_batch([joined[spans[i][0]:spans[min(i + n, len(spans)) - 1][1]].encode()
                              for i in range(max(1, len(spans) - n + 1))])
            sig = hasher.signature(words)
            assert sig.dtype == ref.hashvalues.dtype and np.array_equal(sig, ref.hashvalues), text[:40]


@pytest.mark.slow   # every code point of the plane, both ways: 7 s under load, to keep the default suite within 5 minutes
def test_translated_words_are_dedup_words_for_every_character():
    """hashing.joined_words (bytes.translate when no character above U+007F is a word character)
    against the regex, for every code point beside ASCII words and alone, and mixed texts."""
    from pretrain.data.hashing import joined_words
    for c in range(0x110000):
        if not 0xD800 <= c < 0xE000:
            text = f"A{chr(c)}b {chr(c)}"
            assert joined_words(text) == " ".join(dedup_words(text)).encode(), hex(c)
    for text in _texts_of_every_kind() + ["\u201cquoted\u201d \u2014 text\u2026", "K\u212a x", "a\ud800b c"]:
        assert joined_words(text) == " ".join(dedup_words(text)).encode("utf-8", "surrogatepass"), text[:40]


@pytest.mark.slow   # numba compiles the words kernel (cold cache in CI): 20 s under load, to keep the default suite within 5 minutes
def test_compiled_words_are_dedup_words_for_every_character():
    """fasthash.views_of (the read stage's compiled scan of a batch's UTF-8 bytes) against dedup_view,
    for every code point of the basic multilingual plane and ones beyond it (the Python path), each
    document alone and all of them in one batch (a document that takes the Python path among
    compiled ones leaves the others' bounds as they were)."""
    from pretrain.data.fasthash import views_of
    from pretrain.data.hashing import dedup_view

    def views(texts):
        return views_of([x.encode() for x in texts], texts)

    chars = [chr(c) for c in range(0x10000) if not 0xD800 <= c < 0xE000] + ["\U0001F600", "\U00010400"]
    texts = [f"A{ch}b {ch}" for ch in chars]
    for text, (got,) in zip(texts, map(views, ([x] for x in texts))):
        want = dedup_view(text)
        assert got.joined == want.joined == " ".join(dedup_words(text)).encode(), text
        assert np.array_equal(got.starts, want.starts) and np.array_equal(got.ends, want.ends), text
    texts += _texts_of_every_kind() + ["ΣΑΣ σας", "İstanbul"]
    batch = views(texts)
    assert len(batch) == len(texts)
    for text, got in zip(texts, batch):
        want = dedup_view(text)
        assert got.joined == want.joined and np.array_equal(got.starts, want.starts) \
            and np.array_equal(got.ends, want.ends), text[:40]


def test_shingle_units_are_characters_of_unspaced_scripts_and_words_elsewhere():
    """A run of Han (or kana, Thai...) characters is one \\w+ word up to the next punctuation mark; its
    shingle units are its characters, every other script's are its words, in one mixed document. The
    array computation (dedup_view) against the regex definition (unit_spans), for every code point."""
    from pretrain.data.hashing import dedup_view, unit_spans

    def units(text):
        w = dedup_view(text)
        return [w.joined[a:b].decode("utf-8", "surrogatepass") for a, b in zip(w.starts, w.ends)]

    assert units("GPU加速训练，Hello world。日本語のテキスト ภาษา 한국어 말") == [
        "gpu", "加", "速", "训", "练", "hello", "world", "日", "本", "語", "の", "テ", "キ", "ス", "ト",
        "ภ", "า", "ษ", "า", "한국어", "말"]
    assert units("Plain English, words only.") == ["plain", "english", "words", "only"]
    for c in list(range(0x80, 0x10000, 7)) + [0x3007, 0x9FFF, 0x20000, 0x2A6DF, 0x1F600, 0x10400]:
        if 0xD800 <= c < 0xE000:
            continue
        text = f"x{chr(c)}y {chr(c)}{chr(c)} 中{chr(c)}"
        joined = " ".join(dedup_words(text))
        assert units(text) == [joined[a:b] for a, b in unit_spans(joined)], hex(c)


@pytest.mark.slow   # numba compiles the MinHash kernel (cold cache in CI): 9 s under load, to keep the default suite within 5 minutes
def test_compiled_minhash_is_the_numpy_one_bit_for_bit():
    """The compiled MinHash of a batch of documents (one call for them all) row for row against the
    numpy one of each document; a document alone is a batch of one."""
    from pretrain.data.fasthash import views_of
    texts = _texts_of_every_kind()
    views = views_of([x.encode() for x in texts], texts)
    for num_perm, n in ((128, 5), (16, 1), (16, 3)):
        hasher = MinHasher(num_perm, n)
        want = np.stack([hasher.signature(dedup_words(text)) for text in texts])
        assert np.array_equal(hasher.signatures_of(views, compiled=True), want)
        assert np.array_equal(hasher.signatures_of(views, compiled=False), want)
        assert np.array_equal(hasher.signatures_of(views[3:4], compiled=True), want[3:4])
        assert hasher.signatures_of([], compiled=True).shape == (0, num_perm)


def test_validation_split_is_stable_and_near_the_fraction():
    keys = [f"doc{i}".encode() for i in range(20_000)]
    held = [is_validation(k, 0.05) for k in keys]
    assert held == [is_validation(k, 0.05) for k in keys]
    assert 0.04 < np.mean(held) < 0.06
    assert not any(is_validation(k, 0.0) for k in keys[:100])


# ---------------------------------------------------------------- pack

def _segments(rows):
    out = []
    for ids, lens in zip(rows.ids, np.split(rows.seg_lens, np.cumsum(rows.seg_counts)[:-1])):
        at = 0
        for n in lens.tolist():
            out.append(tuple(ids[at:at + n].tolist()))
            at += n
        assert (ids[at:] == 0).all()           # the rest of the row is padding
    return out


def test_best_fit_keeps_short_documents_whole_and_splits_only_long_ones():
    rng = np.random.default_rng(0)
    cap = 65
    # short documents are the common case in real corpora (geometric lengths), plus a few long ones
    lens = (np.minimum(rng.geometric(1 / 15, size=600), 60) + 1).tolist() + [65, 130, 200]
    docs, tokens = _docs_from_lengths(lens, rng)
    rows, leftover, split = pack_best_fit(docs, cap, pad_id=0)
    assert split == 2 and leftover.num_tokens == 0                       # 130 and 200 are split
    segs = _segments(rows)
    whole = [tuple(t) for t in tokens if len(t) <= cap]
    assert set(whole) <= set(segs)                                       # every short doc intact
    assert sorted(sum(segs, ())) == sorted(sum(tokens, []))              # no token lost or added
    pad = rows.ids.size - rows.num_tokens
    assert pad / rows.ids.size < 0.02
    assert len(rows) <= _next_fit_rows([len(t) for t in tokens], cap)   # never worse than greedy in order


def _next_fit_rows(lens, cap):
    rows, room = 0, 0
    for n in lens:
        while n > 0:
            if room == 0 or (n <= cap and n > room):
                rows, room = rows + 1, cap
            take = min(n, room)
            n, room = n - take, room - take
    return rows


def test_best_fit_decreasing_is_best_fit():
    bins = best_fit_decreasing(np.array([6, 5, 4, 3, 2]), 10)
    assert [sorted(b) for b in bins] == [[0, 2], [1, 3, 4]]              # 6+4, 5+3+2


def test_best_fit_hands_back_loose_rows():
    docs, _ = _docs_from_lengths([40, 40, 40], np.random.default_rng(1))
    rows, leftover, _ = pack_best_fit(docs, 65, pad_id=0, max_room=5)
    assert len(rows) == 0 and leftover.lens.tolist() == [40, 40, 40]


def test_concat_rows_are_the_stream_cut_every_capacity_tokens():
    rng = np.random.default_rng(2)
    cap = 17
    packer = ConcatPacker(cap, pad_id=0)
    all_tokens, rows = [], []
    for _ in range(5):
        docs, toks = _docs_from_lengths(rng.integers(2, 40, size=7).tolist(), rng)
        all_tokens += sum(toks, [])
        rows.append(packer.add(docs))
    rows.append(packer.flush())
    ids = np.concatenate([r.ids for r in rows]).ravel()
    seg = np.concatenate([r.seg_lens for r in rows])
    assert ids[:len(all_tokens)].tolist() == all_tokens and (ids[len(all_tokens):] == 0).all()
    assert seg.sum() == len(all_tokens)
    assert all(r.seg_counts.sum() == len(r.seg_lens) for r in rows)
    # ground truth: a document is truncated when a row edge falls strictly inside it
    ends = np.cumsum([len(t) for t in _split_by_eod(all_tokens)])
    starts = ends - np.diff(np.concatenate([[0], ends]))
    assert packer.truncated == int(np.sum(starts // cap != (ends - 1) // cap)) > 0


def _split_by_eod(tokens):
    out, cur = [], []
    for t in tokens:
        cur.append(t)
        if t == 1:
            out.append(cur)
            cur = []
    return out


# ---------------------------------------------------------------- mixture

def test_apportion_is_exact_and_proportional():
    assert apportion([0.6, 0.3, 0.1], 1000).tolist() == [600, 300, 100]
    assert apportion([1, 1, 1], 100).sum() == 100


def test_mixture_is_random_access_and_counts_each_dataset_in_order():
    sched = MixtureSchedule([0.6, 0.3, 0.1], seed=7, stream=[0, 0], block=1000)
    slots = np.arange(3500)
    d, c = sched.draw(slots)
    for k in range(3):                     # sample numbers of each dataset are 0, 1, 2, ... in slot order
        assert c[d == k].tolist() == list(range(int((d == k).sum())))
    assert np.bincount(d[:3000]).tolist() == [1800, 900, 300]
    d2, c2 = MixtureSchedule([0.6, 0.3, 0.1], seed=7, stream=[0, 0], block=1000).draw(slots[::-1])
    assert (d2[::-1] == d).all() and (c2[::-1] == c).all()
    other, _ = MixtureSchedule([0.6, 0.3, 0.1], seed=8, stream=[0, 0], block=1000).draw(slots)
    assert (other != d).any()


# ---------------------------------------------------------------- the sample corpus

def _check_problem(p):
    nums = [int(x) for x in re.findall(r"-?\d+", p.question)]
    want = {
        "multiply": lambda: nums[0] * nums[1],
        "add": lambda: nums[0] + nums[1],
        "subtract": lambda: nums[0] - nums[1],
        "divide": lambda: f"quotient {nums[0] // nums[1]}, remainder {nums[0] % nums[1]}",
        "gcd": lambda: np.gcd(nums[0], nums[1]),
        "count_multiples": lambda: nums[2] // nums[0],          # "multiples of k from 1 to n"
        "fractions": lambda: Fraction(nums[0], nums[1]) + Fraction(nums[2], nums[3]),
        "boolean": lambda: _boolean(p.question),
    }
    if p.family == "linear":
        a, b, c = nums[0], nums[1] * (-1 if "−" in p.question else 1), nums[2]
        assert p.answer == f"x = {(c - b) // a}" and a * ((c - b) // a) + b == c
    elif p.family in want:
        assert p.answer == str(want[p.family]()), p


def _boolean(question):
    pattern = r"\((not )?\((\w+) (and|or) (\w+)\)\) (and|or) (\w+)"
    neg, x, op1, y, op2, z = re.search(pattern, question).groups()
    ops = {"and": lambda a, b: a and b, "or": lambda a, b: a or b}
    inner = ops[op1](x == "True", y == "True")
    return ops[op2](not inner if neg else inner, z == "True")


def test_generated_problems_have_correct_answers():
    for p in (next(s) for s in [sample.problems(random.Random(3))] for _ in range(2000)):
        _check_problem(p)


@pytest.mark.slow   # generates the whole reasoning source twice (~4 s); test_data_sample.py builds on it
def test_sample_sources_are_bounded_and_deterministic():
    first = [d.text for d in sample.documents("reasoning")]
    assert [d.text for d in sample.documents("reasoning")] == first
    assert sum(map(len, first)) <= sample.BUDGET["reasoning"] + 5000
    assert any(t.startswith("# from ") and "def " in t for t in first)          # real stdlib code
    assert any(t.startswith("Problem: ") for t in first)                       # generated problems
    anneal = list(sample.documents("anneal"))
    assert any("### Instruction\nExplain what `" in d.text for d in anneal)


def test_a_streamed_writer_waits_for_each_chunk_and_stops_when_the_stage_beside_it_fails(tmp_path):
    """stages._beside / _published: the writer reads a chunk only once it is published; when the
    tokenize stage fails, the writer is stopped and joined, and the stage's own error is raised."""
    import threading
    from pretrain.data import stages
    chunks = [tmp_path / f"c{i}" for i in range(3)]
    read = []

    def writer():
        for c in chunks:
            read.append(stages._published(str(c), wait=True)["split"])
        return ["written"]

    def publish(c, i):
        c.mkdir()
        (c / stages.DONE).write_text(json.dumps({"split": {"0": i}}))

    with stages._beside(writer) as out:
        for i, c in enumerate(chunks):
            assert len(read) == i          # nothing read before it is published
            publish(c, i)
            deadline = time.time() + 10
            while len(read) < i + 1 and time.time() < deadline:
                time.sleep(0.01)
    assert out.result == ["written"] and read == [{"0": 0}, {"0": 1}, {"0": 2}]

    waiting = threading.Event()

    def stuck():
        waiting.set()
        return stages._published(str(tmp_path / "never"), wait=True)

    with pytest.raises(KeyboardInterrupt):
        with stages._beside(stuck):
            waiting.wait(10)
            raise KeyboardInterrupt
    assert not [t for t in threading.enumerate() if t.name == "shard-writer"]

    def failing():
        raise OSError("disk full while writing a shard")

    with pytest.raises(OSError, match="disk full"):
        with stages._beside(failing):
            pass


def test_the_default_lsh_settings_table_is_what_datasketch_computes():
    """pretrain.data.lsh_default spares a data build datasketch's import (and scipy's): its numbers
    are datasketch's own for the schema's default settings, which therefore use it."""
    from datasketch.lsh import _optimal_param

    from pretrain.config.schema import DedupConfig
    from pretrain.data import dedup as dedup_module, lsh_default
    defaults = DedupConfig()
    assert (defaults.threshold, defaults.num_perm) == lsh_default.SETTINGS
    assert _optimal_param(*lsh_default.SETTINGS, 0.5, 0.5) == (lsh_default.BANDS, lsh_default.WIDTH)
    a, b = dedup_module._permutations(lsh_default.SETTINGS[1])
    assert a.tolist() == lsh_default.A and b.tolist() == lsh_default.B
    other = dedup_module.lsh_params({"threshold": 0.7, "num_perm": 64, "near": True, "shingle": 5})
    assert other["bands"] * other["width"] <= 64
