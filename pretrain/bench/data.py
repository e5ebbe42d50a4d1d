"""Data pipeline throughput end to end against raw sentencepiece encode, per kind of corpus, side by
side in one run on the same cores.

    python -m pretrain.bench.data [--kinds K,...] [--mb MB] [--input PATH ...] [--workers N]
                                  [--seq-length S] [--repeats R] [--engines local,ray] [--no-cli]
                                  [--scale 1,4,16 --scale-kind K --scale-mb MB] [--nodes 1,8,64]
                                  [--recall-mb MB | --no-recall] [--quick]

Corpora (pretrain.data.corpora, built here from the installed packages, nothing downloaded):
short chat-like documents with exact and near copies, long web-like prose mostly unique and with
near copies (word edits, paragraphs reordered), code; Chinese chat-like documents, Chinese web-like
prose and Chinese-English pages with exact and edited copies; --input times your own files instead.
For each corpus, measured in this one run (throughputs in INPUT tokens per second: the tokens of
every document read, duplicates and dropped documents included, as sentencepiece counts them):
  raw sentencepiece encode   N worker processes, each encoding single-threaded a chunk of the input
                             documents (no cleaning, no dedup, no output), sentencepiece document by
                             document: the pipeline's tokenize stage encodes each distinct word once
                             (pretrain.data.encode), so the pipeline can run faster than this
  encode + MindRecord write  the same encode, each chunk's ids then cut into rows and written by
  (floor)                    MindSpore's MindRecord writer as the shards are: the least a pipeline that
                             hands training MindRecord files does after encoding, so its ratio to raw
                             encode bounds every row below (on Chinese the writer costs about as much
                             CPU as the encode: no pipeline reaches 0.8 of raw encode there)
  local / ray, dedup on|off  prepare() from the raw files: read, clean, exact + near dedup (on),
                             held-out split, tokenize, pack, MindRecord shards, manifest (tokenizer
                             given, so no training). engine=ray runs on a Ray instance started here
                             with N CPUs before the clock starts (as a cluster is up before a job);
                             its start-up is printed apart, and added to it in a column of its own
  command line               `python -m pretrain.data ...` on the same files, dedup on, timed from
                             outside as a user sees it: interpreter, imports and Hydra included
  per stage                  tasks, wall and task CPU seconds, input MB per core-second, the peak
                             resident MB of a task's process and what the task itself added to it,
                             shuffle bytes, from the repeat of median wall time
  projection                 hours for 1 TB of input text on N 64-core nodes, computed (not measured)
                             from the per-stage CPU cost per input byte
--scale measures one kind at several sizes (peak resident MB per task as the corpus grows). Then the
near-dedup recall table (pretrain.bench.recall: share of labelled near copies found per kind and band
of Jaccard similarity, beside datasketch's MinHashLSH; --no-recall skips it).
Timed rows are medians of --repeats interleaved runs (raw, then each row, their order reversed
every other repeat). Task CPU seconds (process time of the tasks, all threads; the driver's own CPU
not included) are shown beside wall time: on a shared machine they are the steadier figure.
"""
import argparse
import os
import subprocess
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

from pretrain.config.compose import compose
from pretrain.config.schema import SourceConfig
from pretrain.data.encode import encode_documents
from pretrain.data.mindrecord_file import CoreFile
from pretrain.data.shards import DESCRIPTION, HEADER_BYTES, SCHEMA, page_size

NODE_CORES = 64
SETTLE_S = 8.0
SERIAL = ("components", "concat (driver)")     # one task whatever the data size (the others: many)
TB = 1e12


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


@dataclass
class EncodeTask:
    store: str
    start: int
    stop: int
    model: str
    mindrecord: str = ""    # the floor row: the chunk's ids also written into this MindRecord file
    row: int = 0            # ... as rows of this many tokens


def encode_chunk(t: EncodeTask) -> tuple:
    """(tokens, CPU seconds) of a chunk of the store, sentencepiece alone, one thread: the raw-encode
    baseline; with t.mindrecord, the floor: the same ids then written as MindRecord rows."""
    import sentencepiece as spm

    from pretrain.data.docstore import DocStore
    from pretrain.data.stages import _cached
    cpu = time.process_time()
    sp = _cached(("sp", t.model), lambda: spm.SentencePieceProcessor(model_file=t.model))
    texts = DocStore(Path(t.store)).texts(t.start, t.stop)
    if not t.mindrecord:
        return sum(map(len, sp.encode(texts, num_threads=1))), time.process_time() - cpu
    ids, _ = encode_documents(sp, texts)
    write_rows(ids, t.row, Path(t.mindrecord))
    return len(ids), time.process_time() - cpu


def write_rows(ids: np.ndarray, row: int, path: Path) -> None:
    """ids cut into rows of `row` tokens (the rest dropped), each with one segment, written and
    committed by MindSpore's MindRecord writer as the pipeline's shards are (pretrain.data.shards):
    the least any pipeline that hands training MindRecord files must do after encoding."""
    n = len(ids) // row
    whole = np.array([row], np.int32)
    out = CoreFile(path, SCHEMA, DESCRIPTION, HEADER_BYTES, page_size(n * row * 4))
    out.write([(r, whole) for r in ids[:n * row].reshape(n, row)])
    out.commit()


def _raw_store(files: List[Path], out: Path, max_chars: int) -> int:
    """Every input document as read (nothing cleaned or dropped but unreadable ones) into a
    document store; the number of documents."""
    from pretrain.data.docstore import DocStoreWriter
    from pretrain.data.sources import Drop, read_documents
    writer, n = DocStoreWriter(out), 0
    for item in read_documents(files, "text", max_chars):
        if not isinstance(item, Drop):
            writer.add(item.text, False)
            n += 1
    writer.close()
    return n


def _start_ray(workers: int, temp_dir: Path) -> float:
    t0 = time.perf_counter()
    import ray
    ray.init(num_cpus=workers, include_dashboard=False, _temp_dir=str(temp_dir), logging_level="ERROR",
             log_to_driver=False)
    ray.get(ray.remote(lambda: 0).remote())     # a worker process is up, as on a running cluster
    took = time.perf_counter() - t0
    time.sleep(SETTLE_S)     # Ray's own processes keep a core busy for a while after start: not in any row
    return took


def _projection(profile: Dict[str, Dict], fixed_s: float, in_bytes: int, nodes: List[int]) -> str:
    """Hours for 1 TB on N nodes of NODE_CORES cores from the per-stage CPU seconds per input byte.
    A stage of one task (components, the driver's store concatenation) does not spread over cores;
    fixed_s (the driver's other work between stages) does not grow with the data."""
    scale = TB / in_bytes
    serial = [s for s in SERIAL if s in profile]
    parallel_cpu = sum(c["cpu_s"] for s, c in profile.items() if s not in serial)
    serial_s = sum(profile[s]["wall_s"] for s in serial)
    cells = []
    for n in nodes:
        par = scale * parallel_cpu / (n * NODE_CORES)
        cells.append(f"N={n} {(par + scale * serial_s + fixed_s) / 3600:.2f} h "
                     f"({scale * serial_s / 3600:.2f} h serial)")
    return "projection, not a measurement, 1 TB on N 64-core nodes: " + "; ".join(cells)


ASSUMPTIONS = """projection assumptions: each stage's CPU cost per input byte stays as measured here (same mix
  of text, duplicates and settings); per-core rates scale linearly over N x 64 cores (one task per
  core, the shared file system keeps up, no stragglers); stages run one after another, so their
  times add; data.num_shards at least the core count; serial work (single-task stages: components,
  concat (driver)) grows with the data but not with nodes; the driver's other work is a fixed
  cost; tokenizer training not included."""


@dataclass
class Row:
    """One timed row of a corpus: how it runs and what it measured, per repeat."""
    label: str
    engine: str = ""                   # "" for raw encode
    dedup: bool = True
    cli: bool = False
    walls: List[float] = field(default_factory=list)
    cpus: List[float] = field(default_factory=list)
    runs: List[tuple] = field(default_factory=list)     # (wall, per-stage profile) per repeat
    manifest: Optional[Dict] = None

    @property
    def wall(self) -> float:
        return statistics.median(self.walls)

    @property
    def cpu(self) -> float:
        return statistics.median(self.cpus) if self.cpus else float("nan")

    def chosen(self) -> tuple:
        """The repeat of median wall time: (wall, per-stage profile)."""
        return sorted(self.runs, key=lambda x: x[0])[len(self.runs) // 2]


class Bench:
    def __init__(self, args, tok_path: Path, tok: Dict, tmp: Path) -> None:
        self.args, self.tok_path, self.tok, self.tmp = args, tok_path, tok, tmp
        self.runs = 0
        self.ray_start: Optional[float] = None   # seconds, when this run started a Ray instance

    def _overrides(self, cache: Path, engine: str, dedup: bool) -> List[str]:
        a = self.args
        return [f"model.seq_length={a.seq_length}", f"data.workers={a.workers}", f"data.cache_dir={cache}",
                f"data.tokenizer.path={self.tok_path}", f"data.engine={engine}",
                f"data.dedup.exact={str(dedup).lower()}", f"data.dedup.near={str(dedup).lower()}"]

    def prepare(self, inputs: List[Path], engine: str, dedup: bool) -> tuple:
        """(wall s, per-stage profile, manifest) of one prepare() of the inputs into a fresh cache."""
        from pretrain.data import stages
        from pretrain.data.prepare import prepare
        self.runs += 1
        cfg = compose(self._overrides(self.tmp / f"cache-{self.runs}", engine, dedup)).data
        cfg.sources = {"bench": SourceConfig(paths=[str(p) for p in inputs])}
        stages.profile.clear()
        t0 = time.perf_counter()
        manifest = prepare(cfg, progress=False, wait=False)["bench"].manifest
        wall = time.perf_counter() - t0
        prof = {k: dict(v) for k, v in stages.profile.items()}
        shutil.rmtree(self.tmp / f"cache-{self.runs}", ignore_errors=True)
        return wall, prof, manifest

    def command_line(self, inputs: List[Path]) -> float:
        """Wall seconds of `python -m pretrain.data` on the inputs (dedup on, engine=local), as a
        user's shell times it."""
        self.runs += 1
        cache = self.tmp / f"cache-{self.runs}"
        paths = ",".join(str(p) for p in inputs)
        cmd = [sys.executable, "-m", "pretrain.data", "data=files", "~data.sources.reasoning",
               "~data.sources.anneal", f"data.sources.general.paths=[{paths}]",
               f"model.vocab_size={self.tok['vocab_size']}", *self._overrides(cache, "local", True)]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=self.tmp)
        wall = time.perf_counter() - t0
        shutil.rmtree(cache, ignore_errors=True)
        if proc.returncode:
            raise SystemExit(f"error: {' '.join(cmd)} failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
        return wall

    def corpus(self, name: str, what: str, inputs: List[Path], rows: List[Row]) -> Dict:
        """Every row of one corpus, interleaved over the repeats; prints its table; its ratios."""
        from pretrain.data.docstore import DocStore
        from pretrain.data.engine import LocalEngine
        from pretrain.data.sources import resolve_files
        a = self.args
        files = resolve_files("bench", [str(p) for p in inputs])
        in_bytes = sum(f.stat().st_size for f in files)
        raw_dir = self.tmp / f"raw-{name}"
        n_docs = _raw_store(files, raw_dir, 1_000_000)
        store = DocStore(raw_dir)
        chunks = [EncodeTask(str(store.dir), s, e, str(self.tok_path)) for s, e in store.chunks()]
        floor_dir = self.tmp / f"floor-{name}"
        floor_chunks = [EncodeTask(c.store, c.start, c.stop, c.model, str(floor_dir / f"{i}.mindrecord"),
                                   a.seq_length + 1) for i, c in enumerate(chunks)]
        raw = Row("raw sentencepiece encode")
        floor = Row("encode + MindRecord write (floor)")
        tokens = 0
        for i in range(a.repeats):
            for base, tasks in ((raw, chunks), (floor, floor_chunks)):
                floor_dir.mkdir(exist_ok=True)
                pool = LocalEngine(a.workers)
                t0 = time.perf_counter()
                counted = list(pool.map(encode_chunk, tasks))
                base.walls.append(time.perf_counter() - t0)
                pool.close()
                shutil.rmtree(floor_dir)     # the floor's files: only their writing is measured
                tokens = sum(n for n, _ in counted)
                base.cpus.append(sum(c for _, c in counted))
            for row in (rows if i % 2 == 0 else rows[::-1]):     # order effects cancel
                if row.cli:
                    row.walls.append(self.command_line(inputs))
                    continue
                wall, prof, row.manifest = self.prepare(inputs, row.engine, row.dedup)
                row.walls.append(wall)
                row.runs.append((wall, prof))
                row.cpus.append(sum(c["cpu_s"] for c in prof.values()))
        shutil.rmtree(raw_dir, ignore_errors=True)
        on = next((r.manifest for r in rows if r.manifest and r.dedup), None)
        docs = on["documents"] if on else {}
        print(f"\n=== {name}: {what}\n{len(files)} files, {in_bytes / 1e6:.1f} MB, {n_docs} documents in "
              f"(dedup on: {docs.get('kept', '?')} kept; dropped {docs.get('dropped', {})}), "
              f"{tokens / 1e6:.2f} M input tokens, median of {a.repeats}")
        print(f"{'path':<34} {'wall s':>7} {'M tok/s':>8} {'vs raw':>7} {'task CPU s':>11} "
              f"{'vs raw (CPU)':>13} {'peak task MB':>13}")
        for row in [raw, floor] + rows:
            prof = row.chosen()[1] if row.runs else {}
            peak = max((c["peak_rss_mb"] for c in prof.values()), default=0.0)
            cpu = "" if row.cli else f"{row.cpu:>11.2f} {raw.cpu / row.cpu:>13.2f}"
            print(f"{row.label:<34} {row.wall:>7.2f} {tokens / row.wall / 1e6:>8.3f} "
                  f"{raw.wall / row.wall:>7.2f} {cpu:<25} {(f'{peak:.0f}' if peak else ''):>13}")
        for row in rows:
            if row.runs:
                self.stages(row, in_bytes)
        local = next((r for r in rows if r.engine == "local" and r.dedup and r.runs), None)
        if local:
            wall, prof = local.chosen()
            fixed = max(0.0, wall - sum(c["wall_s"] for c in prof.values()))
            print(_projection(prof, fixed, in_bytes, [int(n) for n in a.nodes.split(",")]))
        # the floor's ratio is the most any row can reach: it encodes and writes, and nothing else
        ratios = {r.label: (raw.wall / r.wall, raw.cpu / r.cpu if not r.cli else None) for r in [floor] + rows}
        for r in rows:   # a job that starts its own Ray instance pays the start-up once per run
            if r.engine == "ray" and self.ray_start is not None:
                ratios[f"{r.label} + Ray start-up"] = (raw.wall / (r.wall + self.ray_start), None)
        return ratios

    def stages(self, row: Row, in_bytes: int) -> None:
        wall, prof = row.chosen()
        print(f"  per stage, {row.label:<20} {'tasks':>6} {'wall s':>7} {'task CPU s':>11} {'MB/core-s':>10} "
              f"{'peak MB':>8} {'task +MB':>9} {'shuffle MB':>11}")
        for stage, c in prof.items():
            rate = in_bytes / 1e6 / (c["cpu_s"] or c["wall_s"] or 1e-9)    # the driver's: by wall time
            print(f"    {stage:<29} {c['tasks']:>6} {c['wall_s']:>7.2f} {c['cpu_s']:>11.2f} {rate:>10.2f} "
                  f"{c['peak_rss_mb']:>8.0f} {c['task_rss_mb']:>9.0f} {c['shuffle_bytes'] / 1e6:>11.2f}")
        between = wall - sum(c["wall_s"] for c in prof.values())
        print(f"    {'driver (between stages)':<29} {'':>6} {between:>7.2f}")

    def scale(self, kind: str, mb: float, factors: List[int]) -> None:
        """Peak resident MB per task of each stage (dedup on, engine=local) at growing sizes."""
        from pretrain.data import corpora
        table: Dict[int, Dict] = {}
        walls: Dict[int, float] = {}
        for f in factors:
            inputs = corpora.write(kind, self.tmp / f"scale-{f}", mb * f)
            walls[f], table[f], _ = self.prepare(inputs, "local", True)
            shutil.rmtree(self.tmp / f"scale-{f}", ignore_errors=True)
        print(f"\n=== peak resident MB of a task's process (what the task added), {kind}, dedup on, "
              f"engine=local, by corpus size")
        print(f"{'stage':<22}" + "".join(f"{f'{f}x = {mb * f:g} MB':>22}" for f in factors))
        for stage in table[factors[0]]:
            cells = []
            for f in factors:
                c = table[f].get(stage)
                cells.append(f"{c['peak_rss_mb']:.0f} (+{c['task_rss_mb']:.0f}), {c['tasks']} tasks"
                             if c else "-")
            print(f"{stage:<22}" + "".join(f"{x:>22}" for x in cells))
        print(f"{'wall s':<22}" + "".join(f"{walls[f]:>22.1f}" for f in factors))


def main(argv=None) -> None:
    from pretrain.data import corpora
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kinds", default=",".join(corpora.KINDS), help=f"of {', '.join(corpora.KINDS)}")
    ap.add_argument("--mb", type=float, default=24.0, help="MB of each generated corpus")
    ap.add_argument("--input", nargs="*", help="your own corpus files/dirs/globs instead of the kinds")
    ap.add_argument("--workers", type=int, default=_cores())
    ap.add_argument("--seq-length", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--tokenizer", help="a sentencepiece .model (default: the sample corpus's, trained once)")
    ap.add_argument("--engines", default="local", help="data.engine values to time end to end (local,ray)")
    ap.add_argument("--no-dedup-off", action="store_true", help="skip the dedup-off rows")
    ap.add_argument("--no-cli", action="store_true", help="skip the command-line row")
    ap.add_argument("--scale", default="", help="corpus size factors for the memory table, e.g. 1,4,16")
    ap.add_argument("--scale-kind", default="short-dup")
    ap.add_argument("--scale-mb", type=float, default=2.0)
    ap.add_argument("--nodes", default="1,8,64", help="node counts of the projection")
    ap.add_argument("--recall-mb", type=float, default=2.0,
                    help="MB of each labelled corpus of the near-dedup recall table (pretrain.bench.recall)")
    ap.add_argument("--no-recall", action="store_true", help="skip the near-dedup recall table")
    ap.add_argument("--quick", action="store_true", help="a smoke test: 0.3 MB corpora, no command line")
    args = ap.parse_args(argv)
    if args.quick:
        args.mb, args.no_cli, args.recall_mb = 0.3, True, 0.15
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = [k for k in kinds if k not in corpora.KINDS]
    if unknown:
        raise SystemExit(f"error: --kinds: unknown {unknown}; known: {', '.join(corpora.KINDS)}")

    import mindspore.mindrecord  # noqa: F401  (before Ray; and once, outside every timed region)

    from pretrain.data import tokenizer as tokenizers
    from pretrain.data.prepare import prepare

    if args.tokenizer:
        tok_path = Path(args.tokenizer)
    else:
        base = compose([f"model.seq_length={args.seq_length}", f"data.workers={args.workers}"]).data
        tok_path = next(iter(prepare(base, progress=False).values())).tokenizer_path
    tok = tokenizers.info(tok_path)
    engines = args.engines.split(",")
    t_all = time.perf_counter()
    print(f"data pipeline benchmark: {_cores()} cores, {args.workers} workers, seq_length {args.seq_length}, "
          f"vocab {tok['vocab_size']}; load average at start {os.getloadavg()[0]:.2f}")
    summary: Dict[str, Dict] = {}
    with tempfile.TemporaryDirectory(prefix="pretrain-bench-") as tmp_s:
        tmp = Path(tmp_s)
        bench = Bench(args, tok_path, tok, tmp)
        ray_dir = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp")) if "ray" in engines else None  # short
        ray_start = bench.ray_start = _start_ray(args.workers, ray_dir) if ray_dir else None
        try:
            corpus_list = [("your input", ", ".join(args.input), [Path(p) for p in args.input])] \
                if args.input else [(k, corpora.KINDS[k].what, None) for k in kinds]
            for name, what, inputs in corpus_list:
                inputs = inputs or corpora.write(name, tmp / name, args.mb)
                rows = [Row(f"{e}, dedup on", e, True) for e in engines]
                if not args.no_dedup_off:
                    rows.append(Row("local, dedup off", "local", False))
                if not args.no_cli:
                    rows.append(Row("command line (process), dedup on", "local", True, cli=True))
                summary[name] = bench.corpus(name, what, inputs, rows)
                if not args.input:
                    shutil.rmtree(tmp / name, ignore_errors=True)
            if args.scale:
                bench.scale(args.scale_kind, args.scale_mb, [int(f) for f in args.scale.split(",")])
        finally:
            if ray_dir:
                import ray
                ray.shutdown()
                shutil.rmtree(ray_dir, ignore_errors=True)

    labels = list(next(iter(summary.values())))
    print("\n=== end to end / raw encode, input tokens/s (wall, and by task CPU time in brackets); "
          "goal: >= 0.8 by wall time on an idle machine")
    print(f"{'corpus':<14}" + "".join(f"{lab:>36}" for lab in labels))
    for name, ratios in summary.items():
        cells = [f"{w:.2f}" + (f" ({c:.2f})" if c is not None else "") for w, c in ratios.values()]
        print(f"{name:<14}" + "".join(f"{x:>36}" for x in cells))
    if ray_start is not None:
        print(f"(Ray start-up: {ray_start:.2f} s, added in the '+ Ray start-up' column only)")
    print(ASSUMPTIONS)
    if not args.no_recall and not args.input:
        from pretrain.bench import recall
        cfg = compose([]).data.dedup
        recall.run(list(corpora.RECALL_KINDS), args.recall_mb,
                   {"threshold": cfg.threshold, "num_perm": cfg.num_perm, "shingle": cfg.shingle}, args.workers)
    print(f"load average at the end {os.getloadavg()[0]:.2f}; benchmark took "
          f"{time.perf_counter() - t_all:.0f} s")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
