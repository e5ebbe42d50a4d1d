"""Step time and fixed memory measured on this hardware, so the plan stops assuming them.

A calibration point is what one real run (or `plan.calibrate=true`'s probe) measured for one
composed config: the FLOPs one device computes per step (the planner's F2 × tokens per device, × 4/3
under full recompute), the median step time after compile, the process's peak host memory and the
memory the planner gives for that config. Points are kept per hardware option in
`<data.cache_dir>/calibration/<hardware.name>.json`, newest last, one per model shape and batch
(a later measurement of the same replaces the older). A plan uses the points of its own engine (our
loop and MindFormers' trainer compile different graphs), of its own model architecture when there
are some (sequence length and batch may differ: they change the FLOPs), else all of the engine's.

The step-time model fitted over those points is `step_s = m x (overhead_s + flops / m / rate(seq))`
for a step of m micro-batches: a fixed cost per micro-batch (its graph's kernel launches, the
accumulation's or the update's per-parameter passes; the step's own, such as the all-reduce's
latency, folded in) plus compute at the rate this device really achieves. Per micro-batch, not per
step: measured here, a dp2 step of two micro-batches of 4 rows at sequence 64 took 0.29-0.32 s where
one of 8 rows at 128 (as many FLOPs) took 0.23-0.26 s. Each point is fitted as the micro-batch it
averages (flops / m, step_s / m). One point (or points of a single size) fixes the rate alone
(overhead 0); two sizes or more at one sequence length fit both by least squares. The rate may depend
on the sequence length, `rate(seq) = flops_per_s x (seq / ref_seq) ** seq_exponent` (longer rows make
larger attention matrices, on which kernels may achieve more or less per FLOP). Points at two
sequence lengths or more fit the exponent (the overhead then comes from the pairs of sizes at one
length). Points at one length take it from another hardware option's points of the same architecture
measured on the same host, when some span two lengths: it is the kernels' property, and a
data-parallel option records its points from real runs, which a user makes at the length they train
(the probe, one process, times two lengths). Without either, it is 0 and the rate is the same for
every seq. Measured here, the probe's exponent is noise around 0 (-0.40 to 0.55 over six
calibrations, each of three points); one from a short dp2 run at a second length moved from -0.29 to
1.23.
The memory model is `rss = model states + fixed_gb + activation_scale x activations`: on CPU MindSpore's
runtime (~1 GB here) plus what its compiled graphs keep of each micro-batch, an unfused multiple
(~12-15x here) of the planned activations and logits (Korthikanti's count for fused kernels), once
per training graph the process compiled (the update cell, and the accumulate cell under gradient
accumulation). Points of two activation sizes fit both by least squares; otherwise the scale is the
hardware option's assumption (hardware.graph_activation_multiple) and the fixed part the median of what
the points held beyond the plan and that multiple of their activations.

Reading and writing the file is this module's only I/O; the planner itself stays pure (it gets a
`Calibration` or None).
"""
import json
import math
import re
import socket
import statistics
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, List, Optional, Tuple

from pretrain.config.layout import engine_of
from pretrain.io import write_atomic

CALIBRATION_DIR = "calibration"
MAX_POINTS = 64     # per hardware option: the newest are kept
ENGINE_TAG = "-mindformers"   # in the shape key of a point MindFormers' trainer measured


@dataclass(frozen=True)
class Point:
    shape: str            # "<architecture>|<sequence and batch>" (a later point with the same replaces it)
    flops: float          # per device per step
    step_s: float         # median measured step time after compile
    rss_gb: float         # peak host memory of the process (rank 0)
    planned_gb: float     # the planner's peak memory for that config (model states + activations)
    host: str
    date: str
    activations_gb: float = 0.0   # of planned_gb: the activations and logits of the graphs it compiled
    seq: int = 0                  # the sequence length it ran (0 in points older than the field: see seq_of)
    micro_batches: int = 1        # per optimizer step on each data-parallel rank (grad_accum)


@dataclass(frozen=True)
class Calibration:
    hardware: str
    overhead_s: float
    flops_per_s: float
    fixed_gb: float
    points: int
    host: str             # of the newest point
    date: str
    activation_scale: float = 1.0
    seq_exponent: float = 0.0   # rate(seq) = flops_per_s x (seq / ref_seq) ** seq_exponent
    ref_seq: int = 0
    exponent_from: str = ""     # the hardware option whose points gave seq_exponent, if not this one

    def step_s(self, flops: float, seq: int = 0, micro_batches: int = 1) -> float:
        """A step of `flops` per device in `micro_batches` micro-batches of sequence length `seq`."""
        rate = self.flops_per_s
        if self.seq_exponent and seq > 0 and self.ref_seq > 0:
            rate *= (seq / self.ref_seq) ** self.seq_exponent
        return micro_batches * self.overhead_s + flops / rate

    def beyond_plan_gb(self, activations_gb: float, graphs: int) -> float:
        return beyond_plan_gb(self.fixed_gb, self.activation_scale, activations_gb, graphs)

    @property
    def source(self) -> str:
        borrowed = f"; sequence scaling from {self.exponent_from}" if self.exponent_from else ""
        points = f"{self.points} point{'s' * (self.points != 1)}"
        return f"measured on {self.host}, {self.date} ({points}{borrowed})"


def beyond_plan_gb(fixed_gb: float, activation_scale: float, activations_gb: float, graphs: int) -> float:
    """What a process holds beyond the plan's peak (states + one micro-batch's activations once): the
    fixed part plus the graphs' multiple of the activations (measured, or the hardware's assumption)."""
    return fixed_gb + (activation_scale * graphs - 1.0) * activations_gb


def path_for(cache_dir: str, hardware: str) -> Path:
    return Path(cache_dir) / CALIBRATION_DIR / f"{hardware}.json"


def read_points(cache_dir: str, hardware: str) -> List[Point]:
    try:
        rows = json.loads(path_for(cache_dir, hardware).read_text())
        return [Point(**row) for row in rows]
    except (OSError, ValueError, TypeError):   # none yet, or not ours: plan on the assumption
        return []


def record(cache_dir: str, hardware: str, point: Point) -> None:
    points = [p for p in read_points(cache_dir, hardware) if p.shape != point.shape] + [point]
    target = path_for(cache_dir, hardware)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(target, json.dumps([asdict(p) for p in points[-MAX_POINTS:]], indent=1))


def new_point(shape: str, flops: float, step_s: float, rss_gb: float, planned_gb: float,
              activations_gb: float, seq: int, micro_batches: int) -> Point:
    return Point(shape=shape, flops=float(flops), step_s=float(step_s), rss_gb=float(rss_gb),
                 planned_gb=float(planned_gb), host=socket.gethostname(), date=time.strftime("%Y-%m-%d"),
                 activations_gb=float(activations_gb), seq=int(seq), micro_batches=int(micro_batches))


def seq_of(point: Point) -> int:
    """The sequence length of a point: its own field, or for an older point the one its shape key names
    (`...|s<seq>-mb...`); 0 if neither says."""
    if point.seq:
        return point.seq
    found = re.search(r"\|s(\d+)-", point.shape)
    return int(found.group(1)) if found else 0


def fit(hardware: str, points: List[Point], activation_scale: float = 1.0) -> Optional[Calibration]:
    """The step-time model and fixed memory of a hardware's points; None without a usable point.
    `activation_scale`: the multiple of the activations assumed (hardware.graph_activation_multiple)
    until points of two activation sizes measure it."""
    pts = [p for p in points if p.flops > 0 and p.step_s > 0]
    if not pts:
        return None
    micro = [replace(p, flops=p.flops / p.micro_batches, step_s=p.step_s / p.micro_batches) for p in pts]
    seqs = {seq_of(p) for p in pts}
    if len(seqs) > 1 and 0 not in seqs:
        overhead, rate, exponent, ref_seq = _fit_over_seq(micro)
    else:
        overhead, rate, exponent, ref_seq = *_fit_one_seq(micro), 0.0, 0
    # the fixed part beyond the assumed multiple of each point's activations (points recorded before the
    # split have none): one point of the default job would otherwise count its activations' multiple as
    # fixed, and plan a model a tenth its size at the default job's memory
    scale = activation_scale
    fixed = max(statistics.median(p.rss_gb - p.planned_gb - (scale - 1.0) * p.activations_gb for p in pts), 0.0)
    held = [p for p in pts if p.activations_gb > 0]
    line = _line([p.activations_gb for p in held],
                 [p.rss_gb - (p.planned_gb - p.activations_gb) for p in held])
    if line:
        fixed, scale = line
    return Calibration(hardware=hardware, overhead_s=overhead, flops_per_s=rate, fixed_gb=fixed,
                       points=len(pts), host=pts[-1].host, date=pts[-1].date, activation_scale=scale,
                       seq_exponent=exponent, ref_seq=ref_seq)


def _fit_one_seq(pts: List[Point]) -> Tuple[float, float]:
    """(overhead_s, flops_per_s): the least-squares line through (flops, step_s), or the rate alone
    (overhead 0) for one size or a line that would cross zero (noise)."""
    line = _line([p.flops for p in pts], [p.step_s for p in pts])
    if line:
        return line[0], 1.0 / line[1]
    return 0.0, sum(p.flops for p in pts) / sum(p.step_s for p in pts)


def _fit_over_seq(pts: List[Point]) -> Tuple[float, float, float, int]:
    """(overhead_s, flops_per_s at ref_seq, seq_exponent, ref_seq) over points at several sequence
    lengths: the overhead is the mean of the lines' intercepts at each length that has two sizes (0
    if none has), then log(rate) = log(flops / (step - overhead)) is a line in log(seq / ref_seq),
    ref_seq being the longest."""
    by_seq = {}
    for p in pts:
        by_seq.setdefault(seq_of(p), []).append(p)
    lines = [_line([p.flops for p in group], [p.step_s for p in group]) for group in by_seq.values()]
    intercepts = [line[0] for line in lines if line]
    overhead = statistics.fmean(intercepts) if intercepts else 0.0
    ref_seq = max(by_seq)
    timed = [p for p in pts if p.step_s > overhead]
    if not timed:
        return (*_fit_one_seq(pts), 0.0, 0)
    xs = [math.log(seq_of(p) / ref_seq) for p in timed]
    ys = [math.log(p.flops / (p.step_s - overhead)) for p in timed]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - mx) ** 2 for x in xs)
    exponent = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / spread if spread else 0.0
    return overhead, math.exp(my - exponent * mx), exponent, ref_seq


def _line(xs: List[float], ys: List[float]) -> Optional[Tuple[float, float]]:
    """(intercept, slope) of the least-squares line through the points, if they span two x values and
    the line has a positive slope and a non-negative intercept; else None."""
    if len({round(x, 6) for x in xs}) < 2:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    if slope <= 0 or my - slope * mx < 0:
        return None
    return my - slope * mx, slope


def load(cfg: Any) -> Optional[Calibration]:
    """The calibration of cfg's hardware option from the cache, or None: the points of cfg's engine
    (our loop and MindFormers' trainer compile different graphs), of its architecture if any were
    recorded, else all of the engine's on that hardware. Its own points all at one sequence length, it
    takes how the rate grows with the sequence from another option's points of the architecture measured
    on the same host (the module's docstring says why)."""
    hardware, cache_dir = str(cfg.hardware.name), str(cfg.data.cache_dir)
    scale = float(cfg.hardware.get("graph_activation_multiple", 1.0))
    theirs = bool(_engine_tag(cfg))
    points = [p for p in read_points(cache_dir, hardware) if (ENGINE_TAG in p.shape) == theirs]
    arch = arch_key(cfg)
    own = [p for p in points if p.shape.split("|")[0] == arch]
    calibration = fit(hardware, own or points, scale)
    lengths = {seq_of(p) for p in own}
    if calibration is None or len(lengths) != 1 or 0 in lengths:
        return calibration
    for other in sorted(path_for(cache_dir, hardware).parent.glob("*.json")):   # the other options
        scaled = other.stem != hardware and fit(other.stem, [
            p for p in read_points(cache_dir, other.stem)
            if (ENGINE_TAG in p.shape) == theirs and p.shape.split("|")[0] == arch
            and p.host == calibration.host])
        if scaled and scaled.ref_seq:
            return replace(calibration, seq_exponent=scaled.seq_exponent, ref_seq=lengths.pop(),
                           exponent_from=other.stem)
    return calibration


def _engine_tag(cfg: Any) -> str:
    """What a shape key ends with for cfg's engine: "" for our loop (the keys before engines were
    told apart are all its), "-mindformers" for MindFormers' trainer."""
    return ENGINE_TAG if engine_of(cfg) == "mindformers" else ""


def arch_key(cfg: Any) -> str:
    m = cfg.model
    return (f"{m.name}-h{m.hidden_size}-l{m.num_layers}-a{m.num_heads}-kv{m.num_kv_heads}"
            f"-f{m.ffn_hidden_size}-v{m.vocab_size}")


def shape_key(cfg: Any) -> str:
    p = cfg.parallel
    return (f"{arch_key(cfg)}|s{cfg.model.seq_length}-mb{p.micro_batch_size}-gb{cfg.train.global_batch_size}"
            f"-dp{p.dp}-rc{p.recompute}{_engine_tag(cfg)}")
