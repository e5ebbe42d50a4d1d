"""What a start or a restart of a job launches: one msrun for our loop (it chains the phases
itself), one per phase for MindFormers' engine, less the phases already finished. Its own module
so the launcher, the node scripts and the job controller share it without importing each other."""
from pathlib import Path
from typing import List, Optional

from omegaconf import DictConfig


def engine_launches(cfg: DictConfig) -> List[Optional[str]]:
    """One msrun launch for our loop (it chains the phases itself); one per phase for MindFormers'
    engine, whose trainer runs once per process (pretrain/engine/mindformers.py)."""
    from pretrain.config.layout import engine_of
    from pretrain.config.phases import phases
    return [str(p.name) for p in phases(cfg)] if engine_of(cfg) == "mindformers" else [None]


def remaining_launches(cfg: DictConfig, run_dir: Path) -> List[Optional[str]]:
    """engine_launches less MindFormers' phases already finished (their final checkpoint is there):
    what a start or a restart of the job still launches ([] : nothing left)."""
    from pretrain.config.layout import engine_of
    if engine_of(cfg) != "mindformers":
        return [None]
    from pretrain.engine.mindformers import unfinished
    return list(unfinished(cfg, run_dir.resolve(), [p for p in engine_launches(cfg) if p]))
