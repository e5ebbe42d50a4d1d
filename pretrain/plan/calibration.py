"""Step time and fixed memory measured on this hardware, so the plan stops assuming them.

A calibration point is what one real run (or `plan.calibrate=true`'s probe) measured for one
composed config: the FLOPs one device computes per step (the planner's F2 × tokens per device, × 4/3
under full recompute), the median step time after compile, the process's peak host memory and the
memory the planner gives for that config. Points are kept per hardware option in
`<data.cache_dir>/calibration/<hardware.name>.json`, newest last, one per model shape and batch
(a later measurement of the same replaces the older). A plan uses the points of its own model
architecture when there are some (sequence length and batch may differ: they change the FLOPs),
else all of the hardware's.

The step-time model fitted over those points is `step_s = overhead_s + flops / flops_per_s`:
a fixed cost per step (kernel launches, the optimizer's per-parameter passes, the all-reduce's
latency) plus compute at the rate this device really achieves. One point (or points of a single
size) fixes the rate alone (overhead 0); two sizes or more fit both by least squares. The memory
model is `rss = model states + fixed_gb + activation_scale x activations`: on CPU MindSpore's
runtime (~1 GB here) plus what its compiled graphs keep of each micro-batch, an unfused multiple
(~12-15x here) of the planned activations and logits (Korthikanti's count for fused kernels), once
per training graph the process compiled (the update cell, and the accumulate cell under gradient
accumulation). Points of two activation sizes fit both by least squares; otherwise the scale is 1
and the fixed part is the median of what the points held beyond the plan.

Reading and writing the file is this module's only I/O; the planner itself stays pure (it gets a
`Calibration` or None).
"""
import json
import socket
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, List, Optional, Tuple

from pretrain.io import write_atomic

CALIBRATION_DIR = "calibration"
MAX_POINTS = 64     # per hardware option: the newest are kept


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

    def step_s(self, flops: float) -> float:
        return self.overhead_s + flops / self.flops_per_s

    def beyond_plan_gb(self, activations_gb: float, graphs: int) -> float:
        """What a process holds beyond the plan's peak (states + one micro-batch's activations once):
        the fixed part plus the graphs' multiple of the activations."""
        return self.fixed_gb + (self.activation_scale * graphs - 1.0) * activations_gb

    @property
    def source(self) -> str:
        return f"measured on {self.host}, {self.date} ({self.points} point{'s' * (self.points != 1)})"


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
              activations_gb: float) -> Point:
    return Point(shape=shape, flops=float(flops), step_s=float(step_s), rss_gb=float(rss_gb),
                 planned_gb=float(planned_gb), host=socket.gethostname(), date=time.strftime("%Y-%m-%d"),
                 activations_gb=float(activations_gb))


def fit(hardware: str, points: List[Point]) -> Optional[Calibration]:
    """The step-time model and fixed memory of a hardware's points; None without a usable point."""
    pts = [p for p in points if p.flops > 0 and p.step_s > 0]
    if not pts:
        return None
    overhead, per_flop = 0.0, sum(p.step_s for p in pts) / sum(p.flops for p in pts)
    line = _line([p.flops for p in pts], [p.step_s for p in pts])
    if line:   # else one size, or a negative overhead (noise): keep the rate alone
        overhead, per_flop = line
    fixed, scale = max(statistics.median(p.rss_gb - p.planned_gb for p in pts), 0.0), 1.0
    held = [p for p in pts if p.activations_gb > 0]   # points recorded before the split say nothing
    line = _line([p.activations_gb for p in held],
                 [p.rss_gb - (p.planned_gb - p.activations_gb) for p in held])
    if line:
        fixed, scale = line
    return Calibration(hardware=hardware, overhead_s=overhead, flops_per_s=1.0 / per_flop, fixed_gb=fixed,
                       points=len(pts), host=pts[-1].host, date=pts[-1].date, activation_scale=scale)


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
    """The calibration of cfg's hardware option from the cache (its architecture's points if any were
    recorded, else all of the hardware's), or None."""
    hardware = str(cfg.hardware.name)
    points = read_points(str(cfg.data.cache_dir), hardware)
    own = [p for p in points if p.shape.split("|")[0] == arch_key(cfg)]
    return fit(hardware, own or points)


def arch_key(cfg: Any) -> str:
    m = cfg.model
    return (f"{m.name}-h{m.hidden_size}-l{m.num_layers}-a{m.num_heads}-kv{m.num_kv_heads}"
            f"-f{m.ffn_hidden_size}-v{m.vocab_size}")


def shape_key(cfg: Any) -> str:
    p = cfg.parallel
    return (f"{arch_key(cfg)}|s{cfg.model.seq_length}-mb{p.micro_batch_size}-gb{cfg.train.global_batch_size}"
            f"-dp{p.dp}-rc{p.recompute}")
