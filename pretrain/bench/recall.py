"""Near-dedup recall and false drops, per kind of corpus and band of true similarity: the data
pipeline's dedup stages beside datasketch's MinHashLSH on the same shingles, at the same threshold
and number of permutations.

    python -m pretrain.bench.recall [--kinds zh-short,zh-long,mixed,en-long] [--mb MB] [--workers N]
                                    [--threshold T] [--num-perm P] [--shingle N]

(also run by `python -m pretrain.bench.data`, after its speed tables). Each kind is a generated corpus
of distinct documents, some with one near copy each (pretrain.bench.corpora.labelled: sentences
replaced, sentences reordered, characters edited, boilerplate lines inserted, at random strengths).
For every labelled pair it computes the exact Jaccard similarity of the two documents' shingle sets
(n consecutive units: words, or characters of scripts written without spaces; pretrain.data.dedup),
then counts a pair as
  found by pretrain.data   the dedup stages (read, exact, near, components; data.engine=local) kept at
                           most one of its two documents
  found by datasketch      MinHashLSH (MinHash of the same shingle bytes, crc32, seed 1) returns the
                           original when queried with the copy
  word shingles            the same, on shingles of n \\w+ words whatever the script: what the stages
                           computed before units (a run of Han characters was one word up to the next
                           punctuation mark), for comparison
Goals (issue 37), per kind: >= 95% of pairs with Jaccard >= threshold + 0.1 found; every band within 5
points of datasketch's or above it; <= 1% of pairs below threshold - 0.2 dropped. Documents without a
copy that the stages dropped as near duplicates are counted too (false drops among unique documents).
"""
import argparse
import json
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Dict, List, Sequence, Set

BANDS = ((0.9, 1.01, ">= 0.9"), (0.8, 0.9, "0.8-0.9"), (0.7, 0.8, "0.7-0.8"), (0.6, 0.7, "0.6-0.7"),
         (0.0, 0.6, "< 0.6"))


def shingle_set(text: str, n: int) -> Set[bytes]:
    """The document's shingles as the dedup stages hash them (before hashing): bytes of n units."""
    from pretrain.data.hashing import dedup_view
    words = dedup_view(text)
    count = max(1, len(words) - n + 1)
    if not len(words):
        return {b""}
    last = len(words) - 1
    return {words.joined[words.starts[k]:words.ends[min(k + n - 1, last)]] for k in range(count)}


def word_shingle_set(text: str, n: int) -> Set[bytes]:
    """Shingles of n \\w+ words, whatever the script (the stages' shingles before units)."""
    from pretrain.data.hashing import dedup_words
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
    from pretrain.config.compose import compose
    from pretrain.data.clean import Cleaner
    from pretrain.data.docstore import DocStore
    from pretrain.data.engine import LocalEngine
    from pretrain.data.prepare import _plain
    from pretrain.data.stages import clean_store
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
    import zlib

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
    from pretrain.bench import corpora
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


def main(argv=None) -> None:
    from pretrain.bench import corpora
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kinds", default=",".join(corpora.RECALL_KINDS))
    ap.add_argument("--mb", type=float, default=2.0, help="MB of each labelled corpus")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threshold", type=float, default=0.8)
    ap.add_argument("--num-perm", type=int, default=128)
    ap.add_argument("--shingle", type=int, default=5)
    args = ap.parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = [k for k in kinds if k not in corpora.RECALL_KINDS]
    if unknown:
        raise SystemExit(f"error: --kinds: unknown {unknown}; known: {', '.join(corpora.RECALL_KINDS)}")
    run(kinds, args.mb, {"threshold": args.threshold, "num_perm": args.num_perm, "shingle": args.shingle},
        args.workers)


def run(kinds: Sequence[str], mb: float, dedup: Dict, workers: int) -> List[str]:
    results = []
    with tempfile.TemporaryDirectory(prefix="pretrain-recall-") as tmp:
        for kind in kinds:
            d = Path(tmp) / kind
            d.mkdir()
            results.append(measure(kind, mb, dedup, workers, d))
            shutil.rmtree(d, ignore_errors=True)
    return report(results, dedup["threshold"])


if __name__ == "__main__":
    main()
