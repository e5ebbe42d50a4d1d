"""Near-dedup recall and false drops, per kind of corpus and band of true similarity: the data
pipeline's dedup stages beside datasketch's MinHashLSH on the same shingles, at the same threshold
and number of permutations.

    python -m pretrain.bench.recall [--kinds zh-short,zh-long,mixed,en-long] [--mb MB] [--workers N]
                                    [--threshold T] [--num-perm P] [--shingle N]

(also run by `python -m pretrain.bench.data`, after its speed tables). Each kind is a generated corpus
of distinct documents, some with one near copy each (pretrain.data.corpora.labelled: sentences
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
import shutil
import tempfile
from pathlib import Path
from typing import Dict, List, Sequence

from pretrain.data import corpora
from pretrain.data.recall import measure, report


def main(argv=None) -> None:
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
