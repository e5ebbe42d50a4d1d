"""The embedded data=sample corpus, prepared once per session in the shared data cache (~20-40 s on
2 cores, so slow: the end-to-end tests that train on it reuse it)."""
import random
import re

import pytest

from pretrain.config.compose import compose
from pretrain.data import prepare, sample as sample_corpus, tokenizer_vocab_size
from pretrain.data.chinese import prose
from pretrain.data.docstore import DocStore
from pretrain.data.hashing import is_validation
from pretrain.data.loader import BatchLoader
from tests.helpers.loader_shares import realised_shares

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cfg(data_cache):
    return compose([f"data.cache_dir={data_cache}"])


@pytest.fixture(scope="module")
def sample(cfg):
    return prepare(cfg.data, progress=False)


def test_sample_has_one_source_per_phase_and_reconciles(sample, cfg):
    assert list(sample) == ["general", "reasoning", "anneal"]
    for p in sample.values():
        d = p.manifest["documents"]
        assert d["in"] == d["kept"] + sum(d["dropped"].values())
        assert p.manifest["train"]["tokens"] > 100_000 and p.manifest["val"]["rows"] > 0
    total = sum(p.manifest["train"]["tokens"] for p in sample.values())
    assert total > cfg.train.total_tokens          # the tiny curriculum does not need to repeat data


def test_best_fit_padding_is_at_most_two_percent(sample):
    for name, p in sample.items():
        assert p.manifest["packing"] == "best_fit"
        assert p.manifest["train"]["padding_fraction"] <= 0.02, name


def test_second_call_reuses_everything(sample, cfg):
    again = prepare(cfg.data, progress=False)
    assert all(p.reused and p.dir == sample[n].dir for n, p in again.items())


def test_tokenizer_is_trained_once_with_reserved_ids_and_keeps_text_exactly(sample, cfg):
    import sentencepiece as spm
    paths = {p.tokenizer_path for p in sample.values()}
    assert len(paths) == 1
    path = paths.pop()
    assert tokenizer_vocab_size(path) == cfg.model.vocab_size
    sp = spm.SentencePieceProcessor(model_file=str(path))
    assert (sp.pad_id(), sp.eos_id(), sp.bos_id(), sp.unk_id()) == (0, 1, 2, 3)
    code = "def f(x):\n    if x:\n\treturn {'a': x ** 2}  # ünïcode 😀\n\n\n    return None\n"
    assert sp.decode(sp.encode(code)) == code


def test_phase_mixes_load_and_realise_their_weights(sample, cfg):
    for phase in cfg.phase.values():
        loader = BatchLoader(sample, dict(phase.mix), batch_size=8, seq_length=cfg.model.seq_length, seed=1)
        batch = loader.batch(3)
        assert batch["input_ids"].shape == (8, cfg.model.seq_length)
        assert batch["input_ids"].max() < cfg.model.vocab_size
        shares = realised_shares(loader, 400)
        for name, w in phase.mix.items():
            assert abs(shares[name] - w / sum(phase.mix.values())) < 0.05, (phase.name, shares)


def _qualnames(store: DocStore, held_out: bool, pattern: str):
    return {m.group(1) for t in store.iter_texts(held_out) for m in [re.search(pattern, t)] if m}


def test_held_out_stdlib_objects_are_held_out_in_every_phase(sample):
    """The split is keyed by the stdlib object: json.dumps held out in general is held out in anneal too."""
    cache = sample["general"].dir.parent.parent
    general = DocStore(next(cache.glob("clean/general-*")))
    anneal = DocStore(next(cache.glob("clean/anneal-*")))
    heading = r"^(?:Module |class )?([\w.]+)"
    asked = r"`(?:[\w]+\(.*?\)` from `)?([\w.]+)[`(]"
    val_general = _qualnames(general, True, heading)
    train_anneal = _qualnames(anneal, False, asked)
    assert len(val_general) > 20 and len(train_anneal) > 1000
    assert not val_general & train_anneal
    assert _qualnames(anneal, True, asked) & val_general          # and the pattern does match held-out ones


_HAN = re.compile("[\u4e00-\u9fff]")


def _store(sample, source: str) -> DocStore:
    return DocStore(next(sample["general"].dir.parent.parent.glob(f"clean/{source}-*")))


def _chinese(text: str) -> bool:
    return len(_HAN.findall(text)) > 0.1 * len(text)


@pytest.mark.parametrize("source, share", [("general", 0.5), ("anneal", 0.2)])
def test_chinese_is_its_share_of_the_characters_in_both_splits(sample, source, share):
    store = _store(sample, source)
    for held_out in (False, True):
        texts = list(store.iter_texts(held_out))
        chinese = sum(len(t) for t in texts if _chinese(t)) / sum(len(t) for t in texts)
        assert abs(chinese - share) < (0.05 if not held_out else 0.15), (held_out, chinese)


def test_chinese_articles_are_held_out_by_their_key(sample, cfg):
    """The split of a generated article is its key's (its place in the stream), in every build."""
    store = _store(sample, "general")
    kept = {t: held for held in (False, True) for t in store.iter_texts(held) if _chinese(t)}
    flags = {}
    for doc in sample_corpus.zh_articles(random.Random(3)):
        if len(flags) == len(kept):
            break
        if doc.text in kept:
            flags[doc.text] = is_validation(doc.key, cfg.data.val_fraction)
    assert flags == kept and 0 < sum(flags.values()) < len(flags)


def test_the_tokenizer_keeps_common_han_characters_as_pieces(sample):
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=str(sample["general"].tokenizer_path))
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    assert len([p for p in pieces if len(p) == 1 and _HAN.match(p)]) > 2000
    assert len([p for p in pieces if len(p) > 1 and all(_HAN.match(c) for c in p)]) > 50     # words too
    text = prose().paragraph(random.Random(11), 40)
    ids = sp.encode(text)
    assert sp.decode(ids) == text and len(ids) < len(text)
    assert sum(map(sp.is_byte, ids)) < 0.02 * len(ids)        # the rare rest: byte fallback
