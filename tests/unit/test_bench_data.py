"""The data benchmark's corpora (pretrain.data.corpora) and a smoke run of the benchmark itself."""
import random

from pretrain.data import corpora

PAGE = "Title of the page\n\n" + "\n\n".join(
    " ".join(f"w{p}x{i}" for i in range(150)) for p in range(4))


def test_near_copies_edit_words_or_reorder_paragraphs():
    rng = random.Random(0)
    edited = corpora._word_edit(PAGE, rng)
    assert edited != PAGE
    assert abs(len(edited.split(" ")) - len(PAGE.split(" "))) <= len(PAGE.split(" ")) // 100
    moved = corpora._reorder(PAGE, rng)
    assert moved != PAGE and sorted(moved.split("\n\n")) == sorted(PAGE.split("\n\n"))
    assert moved.split("\n\n")[0] == "Title of the page"
    for kind in corpora.KINDS.values():
        assert 0 <= kind.exact + kind.words + kind.reorder < 1


def test_labelled_near_copies_span_the_similarity_range():
    """The recall benchmark's corpora: each pair is a document and a near copy made by one of the
    edits, from light to heavy (Jaccard from below 0.6 to above 0.9), and the same for a seed."""
    from pretrain.data.recall import jaccard, shingle_set
    data = corpora.labelled("zh-short", 0.1)
    assert data == corpora.labelled("zh-short", 0.1)
    assert {e for _, _, e in data.pairs} == set(corpora.NEAR_EDITS)
    assert len({i for a, b, _ in data.pairs for i in (a, b)}) == 2 * len(data.pairs)   # one copy each
    sims = [jaccard(shingle_set(data.docs[a], 5), shingle_set(data.docs[b], 5)) for a, b, _ in data.pairs]
    assert min(sims) < 0.6 and max(sims) >= 0.9 and sum(0.6 <= s < 0.9 for s in sims) > len(sims) / 4


def test_near_dedup_finds_chinese_near_copies_as_datasketch_does(tmp_path):
    """The dedup stages on Chinese chat-like documents (one worker, in this process): every pair above
    0.9 Jaccard of character 5-grams found, the same pairs as datasketch's MinHashLSH on the same
    shingles, no pair below 0.6 and no unique document dropped. Word shingles (a run of Han characters
    as one word, what the stages did before) find few of them."""
    from pretrain.data import recall
    dedup = {"threshold": 0.8, "num_perm": 128, "shingle": 5}
    r = recall.measure("zh-short", 0.12, dedup, 1, tmp_path)
    high = [p for p in r.pairs if p.jaccard >= 0.9]
    assert len(high) >= 10 and all(p.ours for p in high)
    assert [p.ours for p in r.pairs] == [p.reference for p in r.pairs]
    assert not any(p.ours for p in r.pairs if p.jaccard < 0.6) and r.unique_dropped == 0
    assert sum(p.words for p in high) < len(high) / 2
    assert recall.report([r], 0.8) == []
