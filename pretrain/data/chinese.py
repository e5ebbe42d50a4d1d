"""Chinese prose generated offline from jieba's dictionary, for the embedded sample corpus.

jieba (a mindformers dependency) ships `jieba/dict.txt`: ~349k words, each with a corpus frequency
and a part-of-speech tag. Sentences come from a small POS grammar (subject, adverb, preposition
phrase, verb with aspect particle, object; clauses joined by conjunctions and Chinese punctuation)
whose words are drawn by frequency within their tag. The grammar is shallow, but what a tokenizer,
a dedup shingler and a tiny model see is realistic: the frequent function words (的 了 是 在) at
their real rates, two-character words dominating, and the characters of common Chinese.

Only words made of the COMMON_CHARS most frequent characters are used (character frequency =
the frequencies of the words it occurs in), so the text draws from a few thousand Han characters, as
everyday Chinese does, and a small vocabulary can keep them as pieces.

The file is read directly, not through `import jieba` (which builds its prefix dictionary, ~1 s).
Everything is deterministic for a given dict.txt and random.Random; the dictionary's sha256 belongs
in any cache key built from this text (dictionary_sha256()).
"""
import bisect
import functools
import importlib.util
import itertools
import random
import re
from collections import Counter
from pathlib import Path
from typing import Dict, List, Tuple

from pretrain.config.errors import PretrainDataError
from pretrain.data.hashing import file_sha256

COMMON_CHARS = 2500      # the Han characters words may use; everyday text needs ~2500 for 99% coverage
# Words jieba's corpus saw fewer times are left out: 60% of the usable entries, 0.85% of the frequency
# mass, and most of the cost of loading the dictionary (which each process building a source pays).
MIN_FREQ = 5
_HAN = re.compile("[\u4e00-\u9fff]+")
# jieba tags -> the grammar's word classes (tags left out: names of people, transliterations and
# the dictionary's single-character junk classes x/zg, whose characters are rare).
_CLASSES = {
    "n": ("n", "vn", "nz", "an"), "place": ("ns", "s"), "org": ("nt",), "v": ("v",), "a": ("a",),
    "ad": ("ad",), "d": ("d",), "p": ("p",), "c": ("c",), "r": ("r",), "m": ("m",), "q": ("q",),
    "f": ("f",), "t": ("t",), "l": ("l", "i"), "y": ("y",),
}
_TAG_CLASS = {tag: cls for cls, tags in _CLASSES.items() for tag in tags}
_DEGREE = ("很", "非常", "比较", "更", "最")
_END = ("。", "。", "。", "。", "。", "。", "！", "？")


def dictionary_path() -> Path:
    """jieba's dict.txt, found without importing jieba."""
    spec = importlib.util.find_spec("jieba")
    path = Path(spec.origin).parent / "dict.txt" if spec and spec.origin else None
    if path is None or not path.is_file():
        raise PretrainDataError("the sample corpus's Chinese text is built from jieba's dictionary "
                                "(jieba/dict.txt), which is not installed: pip install jieba")
    return path


def dictionary_sha256() -> str:
    return file_sha256(dictionary_path())


def _read(path: Path) -> List[Tuple[str, int, str]]:
    """(word, frequency, grammar class) of the entries the grammar can use: every line of dict.txt
    is "word frequency tag", so one split of the whole file parses it (~0.2 s for 349k lines)."""
    fields = path.read_text(encoding="utf-8").split()
    it = iter(fields)
    words = []
    for word, freq, tag in zip(it, it, it):
        cls = _TAG_CLASS.get(tag)
        if cls and len(word) <= 4 and int(freq) >= MIN_FREQ and _HAN.fullmatch(word):
            words.append((word, int(freq), cls))
    return words


def _common_chars(words, how_many: int) -> set:
    weight: Counter = Counter()
    for word, freq, _ in words:
        for ch in word:
            weight[ch] += freq
    # ties broken by the character, so the set does not depend on the dictionary's line order
    ranked = sorted(weight.items(), key=lambda kv: (-kv[1], kv[0]))
    return {ch for ch, _ in ranked[:how_many]}


class _Pool:
    """Words of one class, drawn in proportion to their frequency (bisect on cumulative sums:
    one rng.random() per draw, so a draw sequence is fixed by the rng's state)."""

    def __init__(self, words: List[Tuple[str, int]]):
        words.sort(key=lambda wf: (-wf[1], wf[0]))
        self.words = [w for w, _ in words]
        self.cum = list(itertools.accumulate(f for _, f in words))

    def __call__(self, rng: random.Random) -> str:
        return self.words[bisect.bisect_right(self.cum, rng.random() * self.cum[-1])]


class ChineseProse:
    def __init__(self):
        words = _read(dictionary_path())
        common = _common_chars(words, COMMON_CHARS)
        by_class: Dict[str, List[Tuple[str, int]]] = {cls: [] for cls in _CLASSES}
        for word, freq, cls in words:
            if freq > 0 and all(ch in common for ch in word):
                by_class[cls].append((word, freq))
        self.pool = {cls: _Pool(ws) for cls, ws in by_class.items()}

    # ---------------------------------------------------------------- phrases

    def _noun_phrase(self, rng: random.Random) -> List[str]:
        w = self.pool
        r = rng.random()
        if r < 0.12:
            return [w["r"](rng)]
        if r < 0.22:
            return [w["place"](rng)]
        if r < 0.27:
            return [w["org"](rng)]
        phrase = []
        r = rng.random()
        if r < 0.2:
            phrase += [w["a"](rng), "的"]
        elif r < 0.3:
            phrase += [w["m"](rng), w["q"](rng)]
        elif r < 0.4:
            phrase += [w["n"](rng), "的"]
        phrase.append(w["n"](rng))
        if rng.random() < 0.08:             # an enumeration: 经济、文化和教育
            phrase += ["、", w["n"](rng), "和", w["n"](rng)]
        return phrase

    def _verb_phrase(self, rng: random.Random) -> List[str]:
        w = self.pool
        phrase = []
        if rng.random() < 0.35:
            phrase.append(w["d"](rng))
        if rng.random() < 0.1:
            phrase.append(w["ad"](rng))
        phrase.append(w["v"](rng))
        r = rng.random()
        if r < 0.2:
            phrase.append("了")
        elif r < 0.26:
            phrase.append("着")
        elif r < 0.3:
            phrase.append("过")
        return phrase

    def _clause(self, rng: random.Random) -> List[str]:
        w = self.pool
        r = rng.random()
        if r < 0.35:                        # 我们 也 进行 了 研究
            return self._noun_phrase(rng) + self._verb_phrase(rng) + self._noun_phrase(rng)
        if r < 0.5:                         # 他 在 北京 对 问题 进行 研究
            return (self._noun_phrase(rng) + [w["p"](rng)] + self._noun_phrase(rng)
                    + self._verb_phrase(rng) + self._noun_phrase(rng))
        if r < 0.6:                         # 国家 是 重要 的 地方
            return self._noun_phrase(rng) + [w["d"](rng), "是"] + self._noun_phrase(rng)
        if r < 0.68:                        # 经济 很 快
            return self._noun_phrase(rng) + [rng.choice(_DEGREE), w["a"](rng)]
        if r < 0.76:                        # 在 城市 中 人们 ...
            return ["在"] + self._noun_phrase(rng) + [w["f"](rng), "，"] + self._clause(rng)
        if r < 0.82:                        # 现在 ...
            return [w["t"](rng)] + self._clause(rng)
        if r < 0.88:                        # 《历史》 / “发展” as the object
            mark = ("《", "》") if rng.random() < 0.5 else ("“", "”")
            return (self._noun_phrase(rng) + self._verb_phrase(rng) + [mark[0]]
                    + self._noun_phrase(rng) + [mark[1]])
        if r < 0.94:                        # a set phrase or idiom
            return self._noun_phrase(rng) + [w["l"](rng)]
        return self._noun_phrase(rng) + self._verb_phrase(rng)

    # ---------------------------------------------------------------- public

    def noun(self, rng: random.Random) -> str:
        """A noun, place or organisation: what an article or a question is about."""
        return self.pool[rng.choice(("n", "n", "n", "place", "org"))](rng)

    def sentence(self, rng: random.Random, most: int = 30) -> str:
        """One sentence of about 4..most words, clauses joined by conjunctions, ，；： and ending
        in 。！？ (a question often with its particle: 吗 呢)."""
        target = rng.randint(min(4, most), max(4, most))
        words = self._clause(rng)
        while len(words) < target:
            r = rng.random()
            joint = "，" if r < 0.75 else "；" if r < 0.92 else "："
            words += [joint] + ([self.pool["c"](rng)] if rng.random() < 0.4 else []) + self._clause(rng)
        end = rng.choice(_END)
        if end == "？" and rng.random() < 0.6:
            words.append(rng.choice(("吗", "呢")))
        elif end == "！" and rng.random() < 0.3:
            words.append(self.pool["y"](rng))
        return "".join(words) + end

    def paragraph(self, rng: random.Random, sentences: int) -> str:
        return "".join(self.sentence(rng) for _ in range(sentences))


@functools.lru_cache(maxsize=1)
def prose() -> ChineseProse:
    """The process-wide instance (reading the dictionary takes about a second)."""
    return ChineseProse()
