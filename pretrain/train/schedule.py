"""The learning rate across the curriculum, as pure Python (no mindspore): the trainer feeds its value
to the optimizer every step, the planner and the plotter reuse it, and tests check it fast.

Within one phase of n steps (0-based step i is the LR of the i-th update):
    start  = the LR the previous phase ended at (0 for the first phase of a curriculum)
    peak   = phase.lr.peak, or `start` when it is None (continue where the previous phase ended)
    warmup = round(warmup_fraction · n) steps, linear from start to peak (step w-1 reaches peak)
    end    = phase.lr.end when given, else peak x phase.lr.end_ratio: relative to the phase's own
             peak, so phase.lr.peak=3e-5 from the CLI moves the end with it
    decay  = the remaining steps, from peak to end, reaching `end` exactly on step n-1:
             cosine | linear | constant (stays at peak) | wsd (stable, then linear over the last
             round(wsd_decay_fraction x the decay span) steps, at least 1: the steps after warmup,
             not the whole phase)
So a phase that continues (peak None, no warmup) starts one decay step below where the previous
one ended: the schedule is continuous across phase boundaries. The default curriculum
(conf/phase/*.yaml): general peak P -> 0.3 P; reasoning continues, x 1/3 -> P/10; anneal
continues, x 1/10 -> P/100 (levels() gives these without step counts).
"""

import math
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Sequence

from pretrain.config.errors import PretrainConfigError
from pretrain.config.lr_levels import end_lr, levels  # noqa: F401  (levels: part of the schedule's API)


@dataclass(frozen=True)
class PhaseLR:
    name: str
    steps: int
    start: float
    peak: float
    end: float
    warmup_steps: int
    schedule: str
    wsd_decay_fraction: float = 0.2

    def at(self, step: int) -> float:
        return lr_at(self, step)

    @property
    def final(self) -> float:
        return lr_at(self, self.steps - 1)

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def phase_lr(name: str, steps: int, lr_cfg: Any, start: float) -> PhaseLR:
    """One phase's schedule from its `lr` config block and the LR the previous phase ended at."""
    # The config's values were checked by pretrain/config/validate.py (schedule names, ranges); what
    # is left is what only the run knows: the LR a continuing phase (peak null) starts from.
    schedule = str(lr_cfg.schedule)
    peak = start if lr_cfg.peak is None else float(lr_cfg.peak)
    warmup_fraction = float(lr_cfg.warmup_fraction or 0.0)
    if peak <= 0.0:
        raise PretrainConfigError(
            f"phase {name}: lr.peak is None and there is no previous phase LR to continue "
            f"from (start={start}); set phase.lr.peak (e.g. phase.lr.peak=3e-4)"
        )
    end = end_lr(lr_cfg, peak)
    if not 0.0 <= end <= peak:  # only a continuing phase's start is unknown before the run starts
        raise PretrainConfigError(
            f"phase {name}: lr.end={end:g} is above the LR the phase starts its decay from ({peak:g}): "
            f"a phase decays, it does not climb; lower phase.lr.end or leave it null (peak x lr.end_ratio)"
        )
    return PhaseLR(
        name=name,
        steps=int(steps),
        start=float(start),
        peak=peak,
        end=end,
        warmup_steps=int(round(warmup_fraction * steps)),
        schedule=schedule,
        wsd_decay_fraction=float(getattr(lr_cfg, "wsd_decay_fraction", 0.2) or 0.2),
    )


def lr_at(p: PhaseLR, step: int) -> float:
    if not 0 <= step < p.steps:
        raise ValueError(f"step {step} outside phase {p.name} (0..{p.steps - 1})")
    w = p.warmup_steps
    if step < w:
        return p.start + (p.peak - p.start) * (step + 1) / w
    if p.schedule == "constant":
        return p.peak
    span = p.steps - w
    t = (step - w + 1) / span  # (0, 1]: reaches 1 on the last step
    if p.schedule == "cosine":
        return p.end + (p.peak - p.end) * 0.5 * (1.0 + math.cos(math.pi * t))
    if p.schedule == "linear":
        return p.peak + (p.end - p.peak) * t
    # wsd: stable at peak, then linear to end over the last wsd_decay_fraction of the decay span
    decay = max(1, int(round(p.wsd_decay_fraction * span)))
    into = (step - w + 1) - (span - decay)
    return p.peak if into <= 0 else p.peak + (p.end - p.peak) * into / decay


def curriculum(phases: Sequence[Any], steps: Sequence[int], start: float = 0.0) -> List[PhaseLR]:
    """Chain phase schedules: each starts where the previous one ended."""
    out: List[PhaseLR] = []
    for phase, n in zip(phases, steps, strict=True):
        p = phase_lr(str(phase.name), int(n), phase.lr, out[-1].final if out else start)
        out.append(p)
    return out
