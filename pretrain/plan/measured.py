"""A training run's side of the plan: the plan it trains under, and what it measured recorded as this
hardware's calibration point for the next plan (pretrain.plan.calibration). Used by both engines (our
loop, MindFormers' trainer) in the rank that writes the run's files."""
from typing import Any

from pretrain.config.resolved import ResolvedRun
from pretrain.plan import calibration
from pretrain.plan.planner import device_flops_per_step, memory_split_gb, plan


def plan_of(resolved: ResolvedRun) -> Any:
    """The plan as the launch printed it: the one the app planned (in its own process), else the
    planner with this hardware's calibration, if any (a rank of msrun)."""
    if resolved.plan is not None:
        return resolved.plan
    return plan(resolved, calibration.load(resolved.cfg))


def record_calibration(resolved: ResolvedRun, planned: Any, step_s: float, rss_gb: float) -> None:
    """A run's own calibration point: its step time after compile and its process's peak memory
    (rss_gb; 0 where host memory is not the device's, as on Ascend) for its shape."""
    cfg = resolved.cfg
    states, held = memory_split_gb(planned)
    point = calibration.new_point(calibration.shape_key(cfg), device_flops_per_step(resolved), step_s, rss_gb,
                                  states + held, held, int(cfg.model.seq_length), planned.layout.grad_accum)
    calibration.record(str(cfg.data.cache_dir), str(cfg.hardware.name), point)
