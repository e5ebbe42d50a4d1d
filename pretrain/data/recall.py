"""Near-dedup recall and false drops of the data pipeline's dedup stages on a labelled corpus
(pretrain.data.corpora.labelled), beside datasketch's MinHashLSH on the same shingles: what
`python -m pretrain.bench.recall` measures and prints (its docstring says how a pair counts as found)."""
import json
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Dict, List, Sequence, Set

from pretrain.config.compose import compose
from pretrain.data import corpora
from pretrain.data.clean import Cleaner
from pretrain.data.docstore import DocStore
from pretrain.data.engine import LocalEngine
from pretrain.data.hashing import dedup_view, dedup_words
from pretrain.data.prepare import _plain
from pretrain.data.stages import clean_store

# lazy imports (datasketch): +~1.4 s (scipy); only the recall measurement loads it

BANDS = ((0.9, 1.01, ">= 0.9"), (0.8, 0.9, "0.8-0.9"), (0.7, 0.8, "0.7-0.8"), (0.6, 0.7, "0.6-0.7"),
         (0.0, 0.6, "< 0.6"))


def shingle_set(text: str, n: int) -> Set[bytes]:
    """The document's shingles as the dedup stages hash them (before hashing): bytes of n units."""
    words = dedup_view(text)
    count = max(1, len(words) - n + 1)
    if not len(words):
        return {b""}
    last = len(words) - 1
    return {words.joined[words.starts[k]:words.ends[min(k + n - 1, last)]] for k in range(count)}


def word_shingle_set(text: str, n: int) -> Set[bytes]:
    """Shingles of n \\w+ words, whatever the script (the stages' shingles before units)."""
    words = dedup_words(text)
    return {" ".join(words[k:k + n]).encode() for k in range(max(1, len(words) - n + 1))}


def jaccard(a: Set[bytes], b: Set[bytes]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


@dataclass
class Pair:
    jaccard: float
    edit: str
    ours: bool           # found by the pipeline's dedup stages
    reference: bool      # found by datasketch's MinHashLSH
    words: bool          # ... on word shingles


@dataclass
class KindResult:
    kind: str
    docs: int
    pairs: List[Pair] = field(default_factory=list)
    unique: int = 0               # documents with no near copy (and not one)
    unique_dropped: int = 0       # ... that the stages dropped as near duplicates
    seconds: float = 0.0


def pipeline_kept(docs: Sequence[str], dedup: Dict, workers: int, tmp: Path) -> List[bool]:
    """Which documents the data pipeline's clean and dedup stages keep (a real run of the stages on a
    .jsonl of the documents; held-out documents count as kept)."""
    path = tmp / "docs.jsonl"
    with open(path, "w") as f:
        for text in docs:
            f.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
    cfg = compose([f"data.workers={workers}", "data.dedup.exact=true", "data.dedup.near=true",
                   *(f"data.dedup.{k}={v}" for k, v in dedup.items())]).data
    src = SimpleNamespace(name="recall", files=[path], builtin=None, text_field="text")
    engine = LocalEngine(workers)
    try:
        clean_store(src, cfg, tmp / "store", tmp / "work", engine, _plain)
    finally:
        engine.close()
    store = DocStore(tmp / "store")
    kept = set(store.texts(0, len(store)))
    cleaner = Cleaner(SimpleNamespace(**_plain(cfg.clean)))
    return [cleaner.normalise(text) in kept for text in docs]


def datasketch_found(docs: Sequence[str], pairs, dedup: Dict, shingles: Callable = shingle_set) -> List[bool]:
    """For each pair: whether datasketch's MinHashLSH, holding every document, returns the original
    when queried with the copy."""

    from datasketch import MinHash, MinHashLSH
    lsh = MinHashLSH(threshold=dedup["threshold"], num_perm=dedup["num_perm"])
    proto = MinHash(num_perm=dedup["num_perm"], seed=1, hashfunc=zlib.crc32)
    sigs = []
    for i, text in enumerate(docs):
        m = MinHash(num_perm=dedup["num_perm"], seed=1, hashfunc=zlib.crc32, permutations=proto.permutations,
                    scheme=proto.scheme)
        m.update_batch(list(shingles(text, dedup["shingle"])))
        lsh.insert(i, m)
        sigs.append(m)
    return [a in set(lsh.query(sigs[b])) for a, b, _ in pairs]


def measure(kind: str, mb: float, dedup: Dict, workers: int, tmp: Path, seed: int = 0) -> KindResult:
    t0 = time.perf_counter()
    data = corpora.labelled(kind, mb, seed)
    kept = pipeline_kept(data.docs, dedup, workers, tmp)
    reference = datasketch_found(data.docs, data.pairs, dedup)
    words = datasketch_found(data.docs, data.pairs, dedup, word_shingle_set)
    out = KindResult(kind, len(data.docs))
    n = dedup["shingle"]
    for (a, b, edit), ref, word in zip(data.pairs, reference, words):
        j = jaccard(shingle_set(data.docs[a], n), shingle_set(data.docs[b], n))
        out.pairs.append(Pair(j, edit, not (kept[a] and kept[b]), ref, word))
    paired = {i for a, b, _ in data.pairs for i in (a, b)}
    unique = [i for i in range(len(data.docs)) if i not in paired]
    out.unique, out.unique_dropped = len(unique), sum(not kept[i] for i in unique)
    out.seconds = time.perf_counter() - t0
    return out


def _share(pairs: List[Pair], attr: str) -> str:
    if not pairs:
        return "-"
    found = sum(getattr(p, attr) for p in pairs)
    return f"{found}/{len(pairs)} ({100 * found / len(pairs):.0f}%)"


def report(results: List[KindResult], threshold: float) -> List[str]:
    """Prints the table; returns the goals missed (one line each)."""
    missed = []
    print(f"\n=== near dedup: share of labelled near-copy pairs found, by exact Jaccard of the pair "
          f"(threshold {threshold})")
    print(f"{'kind':<10} {'Jaccard':<9} {'pairs':>6} {'pretrain.data':>16} {'datasketch LSH':>16} "
          f"{'word shingles':>16}")
    for r in results:
        for lo, hi, label in BANDS:
            band = [p for p in r.pairs if lo <= p.jaccard < hi]
            print(f"{r.kind:<10} {label:<9} {len(band):>6} {_share(band, 'ours'):>16} "
                  f"{_share(band, 'reference'):>16} {_share(band, 'words'):>16}")
            if band and sum(p.ours for p in band) < sum(p.reference for p in band) - 0.05 * len(band):
                missed.append(f"{r.kind} {label}: more than 5 points below datasketch")
        high = [p for p in r.pairs if p.jaccard >= threshold + 0.1]
        low = [p for p in r.pairs if p.jaccard < threshold - 0.2]
        if high and sum(p.ours for p in high) < 0.95 * len(high):
            missed.append(f"{r.kind}: {_share(high, 'ours')} of pairs >= {threshold + 0.1:.1f} found (goal 95%)")
        if low and sum(p.ours for p in low) > 0.01 * len(low):
            missed.append(f"{r.kind}: {_share(low, 'ours')} of pairs < {threshold - 0.2:.1f} dropped (goal 1%)")
        print(f"{r.kind:<10} unique documents dropped as near duplicates: {r.unique_dropped}/{r.unique}; "
              f"{r.docs} documents, {r.seconds:.1f} s")
    by_edit: Dict[str, List[Pair]] = {}
    for r in results:
        for p in r.pairs:
            by_edit.setdefault(p.edit, []).append(p)
    print("by edit (all kinds): " + "; ".join(
        f"{e} {len(ps)} pairs, mean Jaccard {sum(p.jaccard for p in ps) / len(ps):.2f}, found {_share(ps, 'ours')}"
        for e, ps in sorted(by_edit.items())))
    print("goals: " + ("all met" if not missed else "MISSED: " + "; ".join(missed)))
    return missed
