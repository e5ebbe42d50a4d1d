"""What a launch of a config that passed the rules does, given its plan: the memory rule of the
rulebook (pretrain/config/validate.py), which needs the planner and so lives above it."""
from typing import List, Tuple

from pretrain.config import validate
from pretrain.config.resolved import ResolvedRun
from pretrain.plan.planner import largest_part, memory_cure
from pretrain.plan.suggest import fitting_layouts


def memory_problems(run: ResolvedRun) -> List[str]:
    """A launch whose planned peak memory exceeds the device, with the layouts that do fit."""
    cfg, plan = run.cfg, run.plan
    if plan.fits or cfg.plan.ignore_memory:
        return []
    largest, gb = largest_part(plan.peak)
    fits = fitting_layouts(cfg)
    offer = ("these fit: " + "; ".join(s.describe() for s in fits)) if fits else (
        f"no option in conf/parallel fits model={cfg.model.name} on hardware={cfg.hardware.name}")
    who = "each device" if plan.peak.stage == "only" else f"the {plan.peak.stage} pipeline stage"
    return [f"plan: {who} needs {plan.peak_gb:.1f} GB > {plan.capacity_gb:g} GB per device of "
            f"hardware={cfg.hardware.name}; largest part {largest} {gb:.1f} GB "
            f"({memory_cure(plan.layout, largest)}); {offer} (plan.ignore_memory=true launches anyway)"]


def verdict(run: ResolvedRun) -> Tuple[str, List[str]]:
    """What a launch of a planned run whose config passed check() does, as a dry run and a sweep row
    say it: ("ok", []), or ("plan only" | "does not fit", the lines that refuse the launch)."""
    plan_only, too_big = validate.training_problems(run.cfg), memory_problems(run)
    return ("does not fit" if too_big else "plan only" if plan_only else "ok"), [*plan_only, *too_big]
