"""`plan.calibrate=true`: time the real training step of the composed model shape on this device before
planning, and record it as this hardware option's calibration (pretrain/plan/calibration.py).

One process, the real MindFormers model and our compiled step, fed random token rows of the composed
shape: steps of one micro-batch and steps of two (accumulate + update), each after its compile, so
the fit separates the step's fixed cost from its compute. Seconds to a minute on CPU, mostly the two
compiles. A data-parallel layout's step (two processes sharing the cores, the all-reduce) is not what
one process measures: there the run records its own calibration (every run does).
"""
import statistics
import time
from typing import Any, List

import numpy as np

from pretrain.config.errors import PretrainConfigError
from pretrain.config.layout import ParallelLayout
from pretrain.plan import calibration
from pretrain.plan.planner import flops_per_token, model_shape, plan
from pretrain.train.measure import peak_rss_gb

TIMED_STEPS = 3


def random_batch(rows: int, seq: int, vocab: int, rng: np.random.Generator) -> dict:
    from pretrain.data.loader import rows_to_batch

    lens = np.array([seq // 2, seq + 1 - seq // 2])   # two documents a row, as packing makes
    return rows_to_batch([(rng.integers(1, vocab, seq + 1).astype(np.int32), lens) for _ in range(rows)], seq)


def probe(cfg: Any) -> List[calibration.Point]:
    """Measure and record this hardware's calibration points for cfg's model shape; returns them."""
    if ParallelLayout.from_config(cfg).world_size > 1:
        raise PretrainConfigError(
            f"plan.calibrate=true probes one process; hardware={cfg.hardware.name} runs "
            f"{ParallelLayout.from_config(cfg).world_size}: a short run records its calibration instead "
            f"(every run does), e.g. add train.total_tokens=<a few steps' tokens>")
    from pretrain.model import builder

    # before MindSpore loads (it reads GLOG_v then); MindFormers' logs beside the calibration, not in ./output
    builder.prepare_environment(str(calibration.path_for(str(cfg.data.cache_dir), "probe").parent))
    from pretrain.train.step import TrainStep, train_step_args

    net = builder.build_model(cfg, pad_token_id=-1)
    step = TrainStep(net, lr=0.0, **{**train_step_args(cfg), "grad_accum": 2})
    mb, seq = int(cfg.parallel.micro_batch_size), int(cfg.model.seq_length)
    rng = np.random.default_rng(0)
    per_micro = mb * seq * flops_per_token(model_shape(cfg.model))
    planned_gb = plan(cfg).peak_gb
    points = []
    for micro in (1, 2):
        batches = [random_batch(mb, seq, int(cfg.model.vocab_size), rng) for _ in range(micro)]
        step.step(batches, 0.0)   # compiles
        times = []
        for _ in range(TIMED_STEPS):
            started = time.perf_counter()
            step.step(batches, 0.0)
            times.append(time.perf_counter() - started)
        shape = f"{calibration.shape_key(cfg)}-probe{micro}"
        points.append(calibration.new_point(shape, micro * per_micro, statistics.median(times),
                                            peak_rss_gb() if cfg.hardware.device == "cpu" else 0.0,
                                            planned_gb))
    for point in points:
        calibration.record(str(cfg.data.cache_dir), str(cfg.hardware.name), point)
    return points
