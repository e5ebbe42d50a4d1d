"""Chinese prose from jieba's dictionary (pretrain.data.chinese), and the sample corpus's Chinese
documents made of it (pretrain.data.sample: articles in general, instruction pairs in anneal)."""
import itertools
import random
import re
from collections import Counter

import pytest

from pretrain.config.compose import compose
from pretrain.config.errors import PretrainDataError
from pretrain.data import chinese, sample
from pretrain.data.chinese import COMMON_CHARS, prose
from pretrain.data.clean import Cleaner
from pretrain.data.documents import Doc

_HAN = re.compile("[\u4e00-\u9fff]")
_PUNCTUATION = set("，。；：！？、“”《》")


def test_same_rng_same_text_and_a_new_instance_draws_the_same():
    a = prose().paragraph(random.Random(7), 20)
    assert a == chinese.ChineseProse().paragraph(random.Random(7), 20)
    assert a != prose().paragraph(random.Random(8), 20)


def test_sentences_are_han_and_chinese_punctuation_ending_in_a_full_stop():
    rng = random.Random(1)
    sentences = [prose().sentence(rng, most=12) for _ in range(300)]
    assert all(s[-1] in "。！？" for s in sentences)
    text = "".join(sentences)
    assert set(text) <= _PUNCTUATION | set(_HAN.findall(text))       # no ASCII, no spaces
    assert set(text) & set("，、“《") and Counter(s[-1] for s in sentences).most_common(1)[0][0] == "。"
    # `most` bounds the words, so short sentences stay short and the default is longer
    longer = [prose().sentence(rng) for _ in range(300)]
    assert sum(map(len, sentences)) < sum(map(len, longer)) * 0.7


def test_characters_follow_common_chinese():
    """Words are drawn by frequency: 的 leads as in real Chinese text, and every character is one of
    the COMMON_CHARS most frequent (what lets a 4096-piece vocabulary keep them as pieces)."""
    text = prose().paragraph(random.Random(3), 3000)
    han = Counter(_HAN.findall(text))
    assert han.most_common(1)[0][0] == "的"
    assert 1500 < len(han) <= COMMON_CHARS
    top = sum(n for _, n in han.most_common(1000)) / sum(han.values())
    assert top > 0.85                                  # the head carries the text, as it does in Chinese


def test_missing_dictionary_is_one_line_naming_what_to_install(monkeypatch):
    monkeypatch.setattr(chinese.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(PretrainDataError, match=r"jieba/dict.txt.*pip install jieba") as info:
        chinese.dictionary_path()
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("make, prefix", [(sample.zh_articles, b"zh-article:"),
                                          (sample.zh_pairs, b"zh-pair:")])
def test_the_samples_chinese_documents_are_stable_keyed_and_pass_the_default_filters(make, prefix):
    """Keyed by their place in the stream (the held-out split follows the key, so it is the same in
    every build), and none dropped by the default cleaning (a "6 × -15" once failed the symbol ratio)."""
    docs = list(itertools.islice(make(random.Random(5)), 400))
    again = itertools.islice(make(random.Random(5)), 400)
    assert [(d.text, d.key) for d in docs] == [(d.text, d.key) for d in again]
    assert [d.key for d in docs] == [prefix + str(i).encode() for i in range(400)]
    clean = Cleaner(compose([]).data.clean)
    assert [(reason, d.text) for d in docs for _, reason in [clean(d.text)] if reason] == []
    assert all(len(_HAN.findall(d.text)) >= 5 for d in docs)


def test_interleaving_keeps_the_languages_mixed_all_along():
    english = [Doc("e" * 100, key=b"e%d" % i) for i in range(100)]
    chinese_docs = [Doc("中" * 300, key=b"z%d" % i) for i in range(30)]
    out = list(sample._interleave(iter(english), iter(chinese_docs)))
    assert [d for d in out if d.key.startswith(b"e")] == english
    assert [d for d in out if d.key.startswith(b"z")] == chinese_docs
    gap = 0
    last_chinese = max(i for i, d in enumerate(out) if d.key.startswith(b"z"))
    for d in out[:last_chinese]:       # while both flow, neither runs ahead by more than a document
        gap += len(d.text) if d.key.startswith(b"e") else -len(d.text)
        assert abs(gap) <= 300


def test_the_samples_cache_key_follows_jiebas_dictionary(tmp_path, monkeypatch):
    before = {b: sample.fingerprint(b) for b in sample.BUILTINS}
    edited = tmp_path / "dict.txt"
    edited.write_bytes(chinese.dictionary_path().read_bytes() + "新词 3 n\n".encode())
    monkeypatch.setattr(chinese, "dictionary_path", lambda: edited)
    after = {b: sample.fingerprint(b) for b in sample.BUILTINS}
    assert after["general"] != before["general"] and after["anneal"] != before["anneal"]
    assert after["reasoning"] == before["reasoning"]           # no Chinese there: still reused
