"""Layouts that fit: when a plan does not fit the device, which parallel options would.

Every option in conf/parallel with as many devices as the hardware, each with the recompute and
ZeRO variants, is checked by the same rules as a launch (pretrain/config/validate.py) and planned
for this model on this hardware; the fastest variant of each option that fits is offered, fastest
options first. Pure Python, like the planner.
"""
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Tuple

from omegaconf import OmegaConf

from pretrain.config import schema
from pretrain.config.compose import config_dir
from pretrain.config.layout import grad_reduce_size, world_size
from pretrain.config.resolved import ResolvedRun
from pretrain.config.validate import RECOMPUTE, layout_problems, num_devices, training_problems
from pretrain.plan.planner import plan

ZERO_STAGES = (0, 1, 2, 3)


@dataclass(frozen=True)
class Suggestion:
    overrides: Tuple[str, ...]     # e.g. ("parallel=dp4tp8pp2", "parallel.recompute=full")
    peak_gb: float
    total_days: float
    tokens_per_s: float
    plan_only: bool                # nothing here trains it yet (validate.training_problems)

    def describe(self) -> str:
        note = ", plan only" if self.plan_only else ""
        return f"{' '.join(self.overrides)} ({self.peak_gb:.1f} GB, {self.total_days:.1f} days{note})"


def parallel_options() -> List[Path]:
    return sorted((Path(config_dir()) / "parallel").glob("*.yaml"))


def _resolved_but_parallel(cfg: Any) -> Any:
    """A copy of cfg with every value resolved except those derived from parallel.* (grad_accum):
    resolving interpolations is most of the cost of checking and planning ~100 variants."""
    resolved = OmegaConf.to_container(cfg, resolve=True)
    raw = OmegaConf.to_container(cfg, resolve=False)

    def keep(r: Any, v: Any) -> Any:
        if isinstance(r, dict):
            return {k: keep(r[k], v[k]) for k in r}
        return r if isinstance(r, str) and "${" in r and "parallel." in r else v
    return OmegaConf.create(keep(raw, resolved))


def fitting_layouts(cfg: Any, limit: int = 3) -> List[Suggestion]:

    devices = num_devices(cfg.hardware)
    work = _resolved_but_parallel(cfg)
    best = []
    for path in parallel_options():
        option = OmegaConf.load(path)
        option.pop("defaults", None)
        base = OmegaConf.merge(OmegaConf.structured(schema.ParallelConfig), option)
        if world_size(base) != devices:
            continue
        candidates = []
        zeros = ZERO_STAGES if grad_reduce_size(base) > 1 else (base.zero_stage,)
        for recompute in RECOMPUTE:
            for zero in zeros:
                work.parallel = OmegaConf.merge(base, {"recompute": recompute, "zero_stage": zero})
                if layout_problems(work):
                    continue
                p = plan(ResolvedRun.of(work, snapshot=False))   # planned at once, before `work` changes
                if not p.fits:
                    continue
                extra = tuple(f"parallel.{k}={v}" for k, v in (("recompute", recompute), ("zero_stage", zero))
                              if v != base[k])
                candidates.append(Suggestion((f"parallel={path.stem}", *extra), p.peak_gb, p.total_days,
                                             p.tokens_per_s, bool(training_problems(work))))
        if candidates:   # the fastest variant; of equally fast ones, the one with fewest changes
            best.append(min(candidates, key=lambda s: (-s.tokens_per_s, len(s.overrides))))
    return sorted(best, key=lambda s: -s.tokens_per_s)[:limit]
