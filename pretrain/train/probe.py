"""`plan.calibrate=true`: time the real training step of the composed model shape on this device before
planning, and record it as this hardware option's calibration (pretrain/plan/calibration.py).

One process, the real MindFormers model and our compiled step, fed random token rows: steps of one
micro-batch of the composed size, of twice its rows, and of its rows at half the sequence length, each
after its compile and the warm-up steps a run's measured step leaves out too (train/measure.py). The
two sizes at one length separate the step's fixed cost from its compute; the second length gives how
the achieved rate changes with the sequence (larger attention matrices; measured here it stays within
noise of the same rate), so a plan at another length than the probe's is not FLOPs alone. Half, not
twice: a probe must fit wherever the composed run fits. One update cell without accumulation buffers,
as a run with one micro-batch per step has: a probe that accumulated timed the buffers' per-parameter
passes too (the plan came out 30% slow). Seconds to a minute on CPU, mostly the three compiles. A
data-parallel layout's step (two processes sharing the cores, the all-reduce) is not what one process
measures: there the run records its own calibration (every run does), and takes how the rate grows with
the sequence from this probe (pretrain/plan/calibration.py).
"""
import statistics
import time
from typing import Any, List, Tuple

import numpy as np
from omegaconf import OmegaConf

from pretrain.config.errors import PretrainConfigError
from pretrain.config.resolved import ResolvedRun
from pretrain.data.loader import rows_to_batch
from pretrain.model import builder
from pretrain.plan import calibration
from pretrain.plan.planner import device_flops_per_step, memory_split_gb, plan
from pretrain.train.measure import WARMUP_STEPS, peak_rss_gb

# lazy imports (pretrain.train.step): by design; step.py imports mindspore (3-10 s) at its top

TIMED_STEPS = 12   # their median: single steady steps here move by 10-20%
MIN_WARMUP_S, MIN_TIMED_S = 1.0, 2.0   # and no fewer seconds: a short shape's steps are the noisiest
MIN_SEQ = 8   # below this a half-length step is all overhead: the probe times one length


def random_batch(rows: int, seq: int, vocab: int, rng: np.random.Generator) -> dict:

    lens = np.array([seq // 2, seq + 1 - seq // 2])   # two documents a row, as packing makes
    return rows_to_batch([(rng.integers(1, vocab, seq + 1).astype(np.int32), lens) for _ in range(rows)], seq)


def probe(run: ResolvedRun) -> List[calibration.Point]:
    """Measure and record this hardware's calibration points for the run's model shape; returns them."""
    cfg = run.cfg
    if run.engine == "mindformers":
        raise PretrainConfigError(
            "plan.calibrate=true times this project's training step; train.engine=mindformers compiles "
            "MindFormers' own: a short run records its calibration instead (every run does), e.g. add "
            "train.total_tokens=<a few steps' tokens>")
    if run.layout.world_size > 1:
        raise PretrainConfigError(
            f"plan.calibrate=true probes one process; hardware={cfg.hardware.name} runs "
            f"{run.layout.world_size}: a short run records its calibration instead "
            f"(every run does), e.g. add train.total_tokens=<a few steps' tokens>")

    # before MindSpore loads (it reads GLOG_v then); MindFormers' logs beside the calibration, not in ./output
    builder.prepare_environment(str(calibration.path_for(str(cfg.data.cache_dir), "probe").parent))
    from pretrain.train.step import TrainStep, train_step_args

    net = builder.build_model(cfg, pad_token_id=-1)
    step = TrainStep(net, lr=0.0, **{**train_step_args(cfg), "grad_accum": 1})
    mb, seq = int(cfg.parallel.micro_batch_size), int(cfg.model.seq_length)
    rng = np.random.default_rng(0)
    points, held = [], 0.0
    for name, rows, length in probe_shapes(mb, seq):
        probed = one_micro_batch(cfg, rows, length)   # what the planner computes for the shape timed
        states, graph = memory_split_gb(plan(probed))
        held += graph   # the process keeps each shape's compiled graph
        batches = [random_batch(rows, length, int(cfg.model.vocab_size), rng)]
        step.step(batches, 0.0)   # compiles (a new input shape)
        timed_steps(step, batches, WARMUP_STEPS, MIN_WARMUP_S)
        times = timed_steps(step, batches, TIMED_STEPS, MIN_TIMED_S)
        shape = f"{calibration.shape_key(cfg)}-probe-{name}"
        rss = peak_rss_gb() if cfg.hardware.device == "cpu" else 0.0
        points.append(calibration.new_point(shape, device_flops_per_step(probed), statistics.median(times),
                                            rss, states + held, held, length, micro_batches=1))
    for point in points:
        calibration.record(str(cfg.data.cache_dir), str(cfg.hardware.name), point)
    return points


def timed_steps(step: Any, batches: list, at_least: int, at_least_s: float) -> List[float]:
    """The times of `at_least` steps, or more until they add up to `at_least_s` seconds."""
    times: List[float] = []
    while len(times) < at_least or sum(times) < at_least_s:
        started = time.perf_counter()
        step.step(batches, 0.0)
        times.append(time.perf_counter() - started)
    return times


def probe_shapes(mb: int, seq: int) -> List[Tuple[str, int, int]]:
    """(name, rows, sequence length) of the steps the probe times."""
    shapes = [("rows", mb, seq), ("rows2", 2 * mb, seq)]
    if seq // 2 >= MIN_SEQ:
        shapes.append(("half-seq", mb, seq // 2))
    return shapes


def one_micro_batch(cfg: Any, rows: int, seq: int) -> ResolvedRun:
    """The run with one micro-batch of `rows` rows of `seq` tokens per step (one process)."""
    probed = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    probed.parallel.micro_batch_size = rows
    probed.train.global_batch_size = rows
    probed.model.seq_length = seq
    return ResolvedRun.of(probed)
