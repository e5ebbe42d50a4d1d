"""The clean stage (pretrain.data.clean): its table counts are the patterns' own on any characters,
its decisions are the plain regex definition's, and Chinese is judged as English is (a wide letter
weighs WIDE characters in the length and symbol filters; a text without one is judged as before)."""
import random
import re
import unicodedata
from types import SimpleNamespace

import pytest

from pretrain.data import clean
from pretrain.data.chinese import prose
from pretrain.data.clean import WIDE, Cleaner, counts, symbol_ratio

_RANGES = "".join(f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in clean.WIDE_RANGES)
_WIDE_LETTER = re.compile(f"(?=\\w)[{_RANGES}]")
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufeff\ufffd]")
# what Chinese, Japanese, Korean, Thai, emoji, fullwidth and control characters bring, beside ASCII
ALPHABET = ([chr(c) for c in range(0, 0x250)] + list("中文训练模型的了是，。、；：？！“”‘’《》（）【】…—·")
            + list("日本語カタカナひらがなー・〜々〆〇ｱｲｳ") + list("한국어ภาษาไทย") + list("ＡＢ１２！＃％＆　")
            + ["\U0001F600", "\U0001F44D", "\U00020000", "\U0002A6D6", "\U0001D400", "\ud800", "\udfff",
               "\u2028", "\u200b", "\ufeff", "\ufffd", "\u3000", "\u00a0", "\U000E0001", "\uffff"])


def _random_text(rng: random.Random) -> str:
    shape = rng.random()
    if shape < 0.3:                                       # anything at all
        return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 60)))
    if shape < 0.6:                                       # Chinese with a little of everything
        text = prose().paragraph(rng, rng.randint(1, 4))
        for _ in range(rng.randint(0, 4)):
            at = rng.randint(0, len(text))
            text = text[:at] + rng.choice(ALPHABET + [" GPU ", "\r\n", "  \n", "\n\n\n\n"]) + text[at:]
        return text
    if shape < 0.8:                                       # mostly ASCII, a few others
        words = [rng.choice(["the", "model", "trains", "x", "=", "(1)", "--", "“quoted”", "café", "中文"])
                 for _ in range(rng.randint(0, 40))]
        return " ".join(words) + rng.choice(["", "\n", "\x07", "\ufeff", " \t\n"])
    return "".join(rng.choice(ALPHABET[-40:]) for _ in range(rng.randint(0, 30)))     # all non-ASCII


def _by_patterns(text: str) -> tuple:
    """(visible, symbols, wide letters, control characters) by the plain regexes."""
    return (len(text) - len(re.findall(r"\s", text)), len(re.findall(r"[^\w\s]", text)),
            len(_WIDE_LETTER.findall(text)), len(_CONTROL.findall(text)))


def _decide(text: str, cfg, wide: int) -> tuple:
    """The clean stage by its plain definition: normalise, then the filters, a wide letter
    weighing `wide` characters (1: the rule before the weight)."""
    if cfg.normalize != "none":
        text = unicodedata.normalize(cfg.normalize, text)
    text = _CONTROL.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))
    text = re.sub(r"\n{3,}", "\n\n", re.sub(r"[ \t]+\n", "\n", text)).strip()
    visible, symbols, letters, _ = _by_patterns(text)
    if len(text) + (wide - 1) * letters < cfg.min_chars:
        return text, "too_short"
    weighted = visible + (wide - 1) * letters
    if (symbols / weighted if weighted else 1.0) > cfg.max_symbol_ratio:
        return text, "symbol_ratio"
    if clean.repeated_line_fraction(text) > cfg.max_repeated_line_fraction:
        return text, "repeated_lines"
    return text, None


def _cfg(**kw):
    base = dict(normalize="NFC", min_chars=32, max_symbol_ratio=0.3, max_repeated_line_fraction=0.5)
    return SimpleNamespace(**{**base, **kw})


def test_the_table_holds_each_patterns_answer_for_every_bmp_code_point():
    table = clean._table()
    assert set(table[:0x10000].tolist()) == {0, *clean._VALUES}     # the values counts() counts, and letters
    for c in range(0x10000):
        assert table[c] == clean._flags(chr(c)), hex(c)
    assert table[0x10000] == clean._ASTRAL_F


def test_counts_are_the_patterns_counts_on_any_characters():
    """ASCII by bytes.translate, any other text by the table: the same counts as the regexes on any
    mix of characters."""
    rng = random.Random(0)
    texts = [_random_text(rng) for _ in range(3000)]
    texts += ["中，" * 40_000, "中" * 70_000 + "😀" * 3, "a，" * 50_000]
    # every 97th code point above the BMP (emoji, Han extensions, unassigned), among Chinese
    astral = [chr(c) for c in range(0x10000, 0x110000, 97)] + [chr(c) for c in range(0x1F000, 0x1FB00)]
    texts += ["中文，" + "".join(astral[i:i + 500]) + " 。" for i in range(0, len(astral), 500)]
    for text in texts:
        assert tuple(counts(text)) == _by_patterns(text), repr(text[:60])
        visible, symbols, letters, _ = _by_patterns(text)
        weighted = visible + (WIDE - 1) * letters
        assert symbol_ratio(text) == (symbols / weighted if weighted else 1.0), repr(text[:60])


@pytest.mark.parametrize("cfg", [_cfg(), _cfg(normalize="NFKC", min_chars=100, max_symbol_ratio=0.1),
                                 _cfg(normalize="none", min_chars=5, max_repeated_line_fraction=0.2)])
def test_the_cleaner_decides_as_the_plain_definition(cfg):
    """Same text and reason as the definition by regexes, on Chinese, mixed, Japanese, emoji and
    control characters; a text with no wide letter decides as the rule before the weight (English
    corpora keep their shards), and a text the old rule kept is still kept."""
    rng = random.Random(1)
    cleaner = Cleaner(cfg)
    seen = set()
    for _ in range(3000):
        text = _random_text(rng)
        if rng.random() < 0.3:                    # short ones: near min_chars
            text = text[:rng.randint(0, 40)]
        if rng.random() < 0.2:                    # repeated lines
            text = "\n".join([text[:20]] * rng.randint(1, 4) + [text[20:]])
        got = cleaner(text)
        assert got == _decide(text, cfg, WIDE), repr(text[:60])
        before = _decide(text, cfg, 1)
        if not _WIDE_LETTER.search(got[0]):
            assert got == before, repr(text[:60])
        elif before[1] is None:
            assert got[1] is None, repr(text[:60])
        seen.add(got[1])
    assert seen >= {None, "too_short", "symbol_ratio", "repeated_lines"}     # every branch was taken


def test_chinese_punctuation_scores_as_english_punctuation_not_as_markup():
    rng = random.Random(2)
    chinese = [prose().paragraph(rng, 5) for _ in range(200)]
    english = ["Training a language model takes data, compute and patience: the data is cleaned, "
               "deduplicated and tokenized (in that order) before the first step."]
    zh = [symbol_ratio(p) for p in chinese]
    assert max(zh) < 0.1 and sum(zh) / len(zh) < 2 * symbol_ratio(english[0])
    # the plain character share put Chinese prose at ~0.12, and this reading list over 0.3
    reading = "推荐书目：《红楼梦》《西游记》《水浒传》《三国演义》《儒林外史》《聊斋志异》"
    assert Cleaner(_cfg())(reading) == (reading, None)
    assert _decide(reading, _cfg(), 1)[1] == "symbol_ratio"
    # debris stays debris in any script
    for debris in ["【】【】【】★★★★★→→→■■■■", "｜｜｜｜：：：：…………——", "<div>{{}}</div>|||###***"]:
        assert Cleaner(_cfg())(debris * 3)[1] == "symbol_ratio"


def test_min_chars_asks_a_chinese_text_for_a_sentence_as_it_asks_english():
    cleaner = Cleaner(_cfg(min_chars=32))
    assert cleaner("What is the weather like today?")[1] == "too_short"        # 31 characters
    assert cleaner("你好，请问今天天气怎么样？")[1] is None                       # 11 letters: 35
    assert cleaner("Thanks, that answers it!")[1] == "too_short"
    assert cleaner("谢谢，明白了！")[1] == "too_short"                             # 5 letters: 17
    assert cleaner("ありがとうございました。また来ます。")[1] is None               # kana weigh as Han


def test_the_clean_key_names_the_wide_weight_and_its_letters(tmp_path, monkeypatch):
    """A cache cleaned by another weight or table is another key, never reused for this one."""
    from pretrain.data.prepare import _plan
    from tests.helpers.data_files import data_cfg, write_jsonl
    src = tmp_path / "src"
    src.mkdir()
    write_jsonl(src / "a.jsonl", ["一篇文档", "another one"])
    cfg = data_cfg(tmp_path / "cache", {"web": [src]})
    keys = {_plan("web", cfg.sources.web, cfg).clean_key}
    monkeypatch.setattr(clean, "WIDE", 2)
    keys.add(_plan("web", cfg.sources.web, cfg).clean_key)
    monkeypatch.setattr(clean, "WIDE_RANGES", clean.WIDE_RANGES[:-1])
    keys.add(_plan("web", cfg.sources.web, cfg).clean_key)
    assert len(keys) == 3
