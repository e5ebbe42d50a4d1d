"""The tokenize stage's unit cache gives sentencepiece's own ids, document by document, for the
BPE models the pipeline trains, and is refused for models where it would not; each chunk goes by
units or by whole documents, whichever pays on it (Chinese lines have no spaces, so they are units
that never repeat), with the same ids either way."""
import random
import re
from types import SimpleNamespace

import numpy as np
import pytest

from pretrain.data import encode
from pretrain.data.chinese import prose
from pretrain.data.encode import WordCache, encode_texts
from pretrain.data.tokenizer import train

ALPHABET = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789.,;:!?()[]{}=+-_'\"#/\\") +
            [" "] * 14 + ["\n"] * 4 + ["\t", "\r", "\u2581", "\u00a0", "\u3000", "\u00e9", "e\u0301",
                                       "\u6f22\u5b57", "\U0001F642", "\u03a3", "\u00bd", "\ufb01"])
WORDS = ["the", "quick", "brown", "fox", "def", "return", "    ", "self.x", "über", "naïve", "1234", "x=1"]


def _texts(n: int, seed: int) -> list:
    rng = random.Random(seed)
    out = ["", " ", "  ", "\n", " \n ", "a", " a", "a ", "\n\na", "x\u2581 y", "\u2581", "   \n\n   x  "]
    for _ in range(n):
        if rng.random() < 0.5:      # word-like text: repeated words, so the cache is hit
            parts = [rng.choice(WORDS) + rng.choice(["", " ", "  ", "\n", ", ", "\n    "])
                     for _ in range(rng.randrange(40))]
        else:                       # anything at all
            parts = [rng.choice(ALPHABET) for _ in range(rng.randrange(120))]
        out.append("".join(parts))
    return out


def _model(tmp_path, model_type: str, vocab: int = 400):
    import sentencepiece as spm
    sentences = iter(_texts(3000, seed=1) + [" ".join(WORDS) * 3] * 200)
    cfg = SimpleNamespace(vocab_size=vocab, model_type=model_type, byte_fallback=True, train_sentences=100000,
                          character_coverage=0.9995)
    path = train(sentences, tmp_path, cfg, threads=1)
    return spm.SentencePieceProcessor(model_file=str(path))


@pytest.fixture(scope="module")
def sp(tmp_path_factory):
    return _model(tmp_path_factory.mktemp("bpe"), "bpe")


def _chinese(n: int, seed: int, english: float) -> list:
    """Chinese documents (lines of prose, now and then an English term between spaces), and a
    share `english` of English-like ones (words, spaces, newlines)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        if rng.random() < english:
            out.append("".join(rng.choice(WORDS) + rng.choice([" "] * 8 + ["\n", ", "]) for _ in range(200)))
            continue
        lines = [prose().paragraph(rng, rng.randint(1, 3)) for _ in range(rng.randint(1, 4))]
        if rng.random() < 0.3:
            lines[0] = f"{lines[0][:5]} {rng.choice(WORDS)} {lines[0][5:]}"
        out.append(rng.choice(["\n", "\n\n"]).join(lines))
    return out


@pytest.fixture(scope="module")
def sp_zh(tmp_path_factory):
    """BPE over Chinese and English, as the default tokenizer is: Han pieces of several characters,
    the rarer characters as bytes."""
    import sentencepiece as spm
    cfg = SimpleNamespace(vocab_size=2000, model_type="bpe", byte_fallback=True, train_sentences=100000,
                          character_coverage=0.98)
    path = train(iter(_chinese(3000, seed=1, english=0.3)), tmp_path_factory.mktemp("zh"), cfg, threads=1)
    model = spm.SentencePieceProcessor(model_file=str(path))
    assert WordCache.fits(model)
    pieces = list(map(model.id_to_piece, range(model.get_piece_size())))
    assert any(len(p) > 1 and "\u4e00" <= p[0] <= "\u9fff" for p in pieces)
    assert any(model.encode("".join(prose().paragraph(random.Random(0), 20)), out_type=str).count(p) for p in
               pieces if p.startswith("<0x"))          # rare characters as bytes
    return model


@pytest.mark.parametrize("way", ["units", "documents", "chosen"])
@pytest.mark.parametrize("english", [0.0, 0.1, 0.5])
def test_chinese_and_mixed_ids_equal_sentencepiece_whichever_way(sp_zh, monkeypatch, way, english):
    texts = _chinese(600, seed=2, english=english)
    want = encode_texts(sp_zh, texts, 1)
    if way == "units":              # every chunk split into units, however long they are
        monkeypatch.setattr(encode, "LONG_UNIT", 10**9)
        monkeypatch.setattr(encode, "SHORT_UNIT", 10**9)
    elif way == "documents":
        monkeypatch.setattr(encode, "LONG_UNIT", 0)
    words = WordCache(sp_zh)
    got = [encode_texts(sp_zh, texts[a:a + 50], 1, words) for a in range(0, len(texts), 50)]
    assert np.array_equal(want.tokens, np.concatenate([g.tokens for g in got]))
    assert np.array_equal(want.lens, np.concatenate([g.lens for g in got]))
    assert words.chunks[way] == len(got) if way != "chosen" else sum(words.chunks.values()) == len(got)


def _mean_unit(texts: list) -> float:
    units = [u for t in texts for u in encode._UNIT.findall(" " + t)]
    return sum(map(len, units)) / len(units)


def test_each_chunk_goes_the_way_that_pays_judged_on_the_chunk_alone(sp_zh):
    def way(texts: list, words: WordCache) -> str:
        before = dict(words.chunks)
        words.encode(texts)
        return next(k for k in before if words.chunks[k] > before[k])

    words = WordCache(sp_zh)
    chinese, english = _chinese(200, seed=3, english=0.0), _chinese(200, seed=3, english=1.0)
    assert _mean_unit(chinese) > encode.LONG_UNIT and _mean_unit(english) < encode.SHORT_UNIT
    assert way(chinese, words) == "documents"                # lines: never split into units
    assert way(english, words) == "units"                    # words
    assert way(chinese[:100] + english[:100], words) == "units"   # the English half pays for it
    # units of middling length (Chinese clauses between English words): by what repeats in the chunk
    rng = random.Random(4)
    spaced = [" ".join(f"{prose().paragraph(rng, 2)[:20]} {rng.choice(WORDS)}" for _ in range(8))
              for _ in range(60)]
    assert encode.SHORT_UNIT < _mean_unit(spaced) < encode.LONG_UNIT
    assert way(spaced, words) == "documents"
    assert way(spaced * 4, words) == "units"
    # the cache's state is no part of it: the same chunk, all its units cached, still goes whole
    assert way(spaced, words) == "documents"


def _same(a, b) -> bool:
    return np.array_equal(a.tokens, b.tokens) and np.array_equal(a.lens, b.lens)


def test_the_pipelines_own_models_fit(sp):
    assert WordCache.fits(sp)


def test_unit_ids_equal_sentencepiece_document_by_document(sp):
    texts = _texts(3000, seed=2)
    want = encode_texts(sp, texts, eod_id=1)
    words = WordCache(sp)      # warm from the chunks before each chunk
    got = [encode_texts(sp, texts[a:b], 1, words) for a, b in ((0, 7), (7, 1000), (1000, len(texts)))]
    assert _same(want, encode_texts(sp, texts, 1, WordCache(sp)))
    assert np.array_equal(want.tokens, np.concatenate([g.tokens for g in got]))
    assert np.array_equal(want.lens, np.concatenate([g.lens for g in got]))
    assert len(words.index) > 100          # the cache was used, not passed by


@pytest.mark.parametrize("bound, size", [("MAX_TOKENS", 50), ("MAX_UNITS", 20)])
def test_a_full_cache_starts_again_and_stays_exact(sp, monkeypatch, bound, size):
    monkeypatch.setattr(encode, bound, size)
    resets = []
    reset = WordCache._reset
    monkeypatch.setattr(WordCache, "_reset", lambda self: (resets.append(1), reset(self)))
    texts = _texts(400, seed=3)
    words = WordCache(sp)
    for a in range(0, len(texts), 40):
        assert _same(encode_texts(sp, texts[a:a + 40], 1), encode_texts(sp, texts[a:a + 40], 1, words))
    assert len(resets) > 3


def test_every_document_holding_the_escape_character_is_encoded_whole(sp):
    texts = ["a\u2581 b", "plain text", "\u2581\u2581 x", "", "more plain"]
    assert _same(encode_texts(sp, texts, 1), encode_texts(sp, texts, 1, WordCache(sp)))


def test_a_unigram_model_does_not_fit_as_its_ties_depend_on_what_came_before(tmp_path):
    unigram = _model(tmp_path, "unigram")
    assert encode.model_type(unigram.serialized_model_proto()) == 1
    assert not WordCache.fits(unigram)
    # the reason: forced, the unit cache gives another (equally scored) segmentation of some text
    texts = _texts(3000, seed=2)
    assert not _same(encode_texts(unigram, texts, 1), encode_texts(unigram, texts, 1, WordCache(unigram)))


def test_models_that_normalise_or_join_words_do_not_fit(tmp_path):
    import sentencepiece as spm
    text = tmp_path / "t.txt"
    lines = ["the cat sat on the mat, the cat sat on the hat"] * 300 + _texts(300, seed=4)[12:]
    text.write_text("\n".join(lines))

    def model(name, **kw):
        spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(tmp_path / name), vocab_size=300,
                                       minloglevel=2, **kw)
        return spm.SentencePieceProcessor(model_file=str(tmp_path / f"{name}.model"))

    assert not WordCache.fits(model("nfkc"))        # sentencepiece's defaults: NFKC, spaces collapsed
    joined = model("joined", normalization_rule_name="identity", remove_extra_whitespaces=False,
                   split_by_whitespace=False)
    pieces = map(joined.id_to_piece, range(joined.get_piece_size()))
    assert any(re.search("[^\u2581]\u2581", p) for p in pieces)
    assert not WordCache.fits(joined)
