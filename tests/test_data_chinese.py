"""Chinese prose from jieba's dictionary (pretrain.data.chinese), the sample corpus's Chinese text."""
import random
import re
from collections import Counter

import pytest

from pretrain.config.errors import PretrainDataError
from pretrain.data import chinese
from pretrain.data.chinese import COMMON_CHARS, prose

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
