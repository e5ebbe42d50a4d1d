"""Data pipeline throughput, side by side on one input and the same cores.

    python -m pretrain.bench.data [--input PATH ...] [--workers N] [--seq-length S] [--repeats R]
                                  [--engines local,ray]

Prints, measured in this one run:
  raw encode           sentencepiece encode with N worker processes (reading the same cleaned
                       documents): the physical limit of the tokenize stage
  tokenize-pack-shard  the pipeline's path from cleaned documents to committed MindRecord shards,
                       best-fit packing, same N workers; its ratio to raw encode (goal >= 0.7)
  concat               the same path with concat-and-chunk packing
  end to end           prepare() from the raw files: read, clean, dedup, tokenize, pack, shard,
                       manifest (tokenizer given, so no training), once per --engines entry
                       (engine=ray: a Ray instance started here with N CPUs, its start-up included)
  packing quality      padding fraction and truncated documents, best-fit vs concat-and-chunk
Throughputs are in encoded tokens per second (EOD excluded, identical for every row); timed rows
are medians of --repeats interleaved runs. CPU seconds (this process plus its workers) are shown
too: on a shared machine they are steadier than wall time. Default input: the standard library's
.py files plus the sample corpus's English prose, written as jsonl (~35 MB).
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

from omegaconf import OmegaConf

from pretrain.config.compose import compose
from pretrain.config.schema import SourceConfig


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def default_input(directory: Path) -> List[Path]:
    """Code and prose from this Python installation, as two jsonl files."""
    from pretrain.data import sample
    code = directory / "stdlib_code.jsonl"
    with open(code, "w") as f:
        for p in sorted(sample.stdlib_dir().rglob("*.py")):
            if "site-packages" in p.parts:
                continue
            try:
                f.write(json.dumps({"text": p.read_text(encoding="utf-8")}) + "\n")
            except (UnicodeDecodeError, OSError):
                continue
    prose = directory / "prose.jsonl"
    with open(prose, "w") as f:
        for doc in sample.documents("general"):
            f.write(json.dumps({"text": doc.text}) + "\n")
    return [code, prose]


def _cpu() -> float:
    t = os.times()      # children count once joined: every worker pool is shut down inside fn
    return t.user + t.system + t.children_user + t.children_system


def _timed(fn):
    """(result, wall seconds, CPU seconds of this process and its workers)."""
    t0, c0 = time.perf_counter(), _cpu()
    out = fn()
    return out, time.perf_counter() - t0, _cpu() - c0


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--input", nargs="*", help="corpus files/dirs/globs (default: built from the stdlib)")
    ap.add_argument("--workers", type=int, default=_cores())
    ap.add_argument("--seq-length", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tokenizer", help="a sentencepiece .model (default: the sample corpus's, trained once)")
    ap.add_argument("--engines", default="local", help="data.engine values to time end to end, e.g. local,ray")
    args = ap.parse_args(argv)

    import mindspore.mindrecord  # noqa: F401  (import once, outside every timed region)

    from pretrain.data import tokenizer as tokenizers
    from pretrain.data.build import build_shards
    from pretrain.data.docstore import DocStore
    from pretrain.data.encode import chunk_tasks, run_tasks
    from pretrain.data.ingest import ingest
    from pretrain.data.prepare import prepare
    from pretrain.data.sources import read_documents, resolve_files

    base = compose([f"model.seq_length={args.seq_length}", f"data.workers={args.workers}"]).data
    if args.tokenizer:
        tok_path = Path(args.tokenizer)
    else:
        tok_path = next(iter(prepare(base, progress=False).values())).tokenizer_path
    tok = tokenizers.info(tok_path)
    cap = args.seq_length + 1

    with tempfile.TemporaryDirectory(prefix="pretrain-bench-") as tmp_s:
        tmp = Path(tmp_s)
        inputs = [Path(p) for p in args.input] if args.input else default_input(tmp)
        files = resolve_files("bench", [str(p) for p in inputs])
        in_bytes = sum(f.stat().st_size for f in files)
        items = read_documents(files, "text", base.clean.max_chars)
        clean, dedup = (OmegaConf.to_container(c) for c in (base.clean, base.dedup))
        stats, t_ingest, c_ingest = _timed(lambda: ingest(items, tmp / "store", clean, dedup,
                                                          base.val_fraction, "bench", False, args.workers))
        store = DocStore(tmp / "store")

        def raw() -> int:
            tasks = chunk_tasks(store, cap, "none", tok["eod_id"], tok["pad_id"], None)
            return sum(r.tokens for r in run_tasks(tasks, tok_path, args.workers))

        def pipeline(method: str, out: Path) -> Dict:
            out.mkdir()
            return build_shards("bench", store, tok_path, tok, seq_length=args.seq_length, method=method,
                                num_shards=1, workers=args.workers, out_dir=out, progress=False)

        timings: Dict[str, List] = {"raw": [], "best_fit": [], "concat": []}
        for i in range(args.repeats):      # interleaved, so load changes hit all three alike
            with_eod, *t = _timed(raw)
            timings["raw"].append(t)
            best, *t = _timed(lambda i=i: pipeline("best_fit", tmp / f"bf{i}"))
            timings["best_fit"].append(t)
            concat, *t = _timed(lambda i=i: pipeline("concat", tmp / f"cc{i}"))
            timings["concat"].append(t)
        tokens = with_eod - len(store)     # encoded tokens, EOD excluded

        e2e = {}
        for engine in args.engines.split(","):
            cfg = compose([f"model.seq_length={args.seq_length}", f"data.workers={args.workers}",
                           f"data.cache_dir={tmp / ('e2e-' + engine)}", f"data.tokenizer.path={tok_path}",
                           f"data.engine={engine}"]).data
            cfg.sources = {"bench": SourceConfig(paths=[str(p) for p in inputs])}
            e2e[engine] = _timed(lambda cfg=cfg: prepare(cfg, progress=False, wait=False))
        sums = {e: [s["sha256"] for s in r[0]["bench"].manifest["train"]["shards"]] for e, r in e2e.items()}

    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
           for k, v in timings.items()}
    (r, rc), (p, pc) = med["raw"], med["best_fit"]
    print(f"data pipeline benchmark: {len(files)} files, {in_bytes / 1e6:.1f} MB in, "
          f"{stats['kept']} documents kept of {stats['in']}, {tokens / 1e6:.2f} M tokens; "
          f"{_cores()} cores, {args.workers} workers, "
          f"seq_length {args.seq_length}, vocab {tok['vocab_size']}, median of {args.repeats}")
    print(f"{'path':<38} {'wall s':>7} {'M tok/s':>8} {'vs raw':>7} {'CPU s':>7} {'vs raw (CPU)':>13}")
    rows = [("raw sentencepiece encode", *med["raw"]),
            ("tokenize -> pack -> shard (best-fit)", *med["best_fit"]),
            ("tokenize -> pack -> shard (concat)", *med["concat"]),
            ("read -> clean -> dedup", t_ingest, c_ingest)]
    rows += [(f"end to end: prepare(), engine={e}", t, c) for e, (_, t, c) in e2e.items()]
    for name, t, c in rows:
        print(f"{name:<38} {t:>7.2f} {tokens / t / 1e6:>8.3f} {r / t:>7.2f} {c:>7.2f} {rc / c:>13.2f}")
    print(f"\n{'packing (train split)':<22} {'rows':>8} {'padding':>9} {'truncated docs':>15}")
    for name, split in (("best-fit decreasing", best["train"]), ("concat-and-chunk", concat["train"])):
        print(f"{name:<22} {split['rows']:>8} {100 * split['padding_fraction']:>8.2f}% "
              f"{split['truncated_documents']:>15}")
    goal = "meets" if r / p >= 0.7 else "MISSES"
    print(f"\ntokenize->pack->shard runs at {r / p:.2f} of raw encode throughput ({goal} the 0.7 goal); "
          f"by CPU time {rc / pc:.2f}")
    if "local" in e2e and "ray" in e2e:
        (_, lt, lc), (_, rt, rc_) = e2e["local"], e2e["ray"]
        same = "identical" if sums["local"] == sums["ray"] else "DIFFERENT"
        print(f"engine=ray / engine=local end to end: {lt / rt:.2f} by wall time, {lc / rc_:.2f} by CPU time "
              f"(CPU of Ray's own processes not counted); train shards {same}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
