"""The run resolved once: what every part below the app is handed instead of asking the config again.

`ResolvedRun.of(cfg)` turns a composed config into one frozen object: the config itself (read-only
from then on), its parallel layout (pretrain/config/layout.py, with micro-batch, gradient
accumulation and recompute) and its phases with their tokens and optimizer steps. The app resolves
it after the rules pass and adds the plan (`with_plan`); a rank resolves the frozen config.yaml the
same way (pretrain/worker.py). The planner, the launch, the engines and the loop take it, so the
layout and the phase steps are computed in one place, once per process.

Pure Python, no mindspore (composing, checking and planning never pay its import).
"""
import copy
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Tuple

from omegaconf import DictConfig, OmegaConf

from pretrain.config.layout import ParallelLayout
from pretrain.config.phases import phase_steps, phase_tokens, phases


@dataclass(frozen=True)
class ResolvedPhase:
    name: str
    node: Any       # the phase's config (lr, mixture, ...): conf/phase/*.yaml
    tokens: float   # phase.tokens, or token_fraction x train.total_tokens
    steps: int      # optimizer steps: round(tokens / (global batch x seq)); 0 where no step fits


@dataclass(frozen=True)
class ResolvedRun:
    cfg: DictConfig                    # the composed config, read-only once resolved
    layout: ParallelLayout
    phases: Tuple[ResolvedPhase, ...]  # in training order: one phase, or the curriculum
    plan: Optional[Any] = None         # the planner's Plan (pretrain/plan/planner.py), once planned

    @classmethod
    def of(cls, cfg: DictConfig, snapshot: bool = True) -> "ResolvedRun":
        """Resolve a composed config (also an invalid one, which the planner is still shown).
        snapshot=False: over the caller's scratch config as it is now, for a use that ends before the
        caller changes it again (the layout search plans ~100 variants, and copying each was a third of
        a 13-job sweep's dry run)."""
        if snapshot:
            cfg = copy.deepcopy(cfg)   # the caller's config stays theirs to change (a sweep's next layout)
            OmegaConf.set_readonly(cfg, True)
        resolved = tuple(ResolvedPhase(str(node.name), node, phase_tokens(cfg, node), phase_steps(cfg, node))
                         for node in phases(cfg))
        return cls(cfg, ParallelLayout.from_config(cfg), resolved)

    def with_plan(self, plan: Any) -> "ResolvedRun":
        return dataclasses.replace(self, plan=plan)

    @property
    def run_dir(self) -> Path:
        return Path(self.cfg.run_dir)

    @property
    def engine(self) -> str:
        """"pretrain" (our loop) or "mindformers" (its trainer): train.engine=auto resolved."""
        return self.layout.engine

    @property
    def phase_names(self) -> Tuple[str, ...]:
        return tuple(p.name for p in self.phases)

    def phase(self, name: str) -> Optional[ResolvedPhase]:
        return next((p for p in self.phases if p.name == name), None)
