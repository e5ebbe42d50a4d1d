"""The phases a composed config trains and the optimizer steps of each: what the rules (validate.py)
check and what a resolved run (resolved.py) holds for every part below the app, kept apart from the
rules so that resolving a run imports no rulebook."""
from typing import Any, List

from omegaconf import DictConfig


def phases(cfg: DictConfig) -> List[DictConfig]:
    """The phases this run trains, in order: one phase, or the curriculum mapping."""
    node = cfg.phase
    return [node] if "name" in node else [node[k] for k in node]


def phase_tokens(cfg: DictConfig, phase: Any) -> float:
    """phase.tokens, or token_fraction x train.total_tokens."""
    if phase.tokens is not None:
        return float(phase.tokens)
    return float(phase.token_fraction or 0.0) * float(cfg.train.total_tokens)


def phase_steps(cfg: DictConfig, phase: Any) -> int:
    """round(phase tokens / (global batch x seq)): the optimizer steps the phase trains; 0 for a
    batch of no tokens (refused by the rules, but the planner is shown such a config in a sweep)."""
    per_step = int(cfg.train.global_batch_size) * int(cfg.model.seq_length)
    return int(round(phase_tokens(cfg, phase) / per_step)) if per_step > 0 else 0
