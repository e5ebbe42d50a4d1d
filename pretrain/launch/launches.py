"""What a start or a restart of a job launches: one msrun for our loop (it chains the phases
itself), one per phase for MindFormers' engine, less the phases already finished. Its own module
so the launcher, the node scripts and the job controller share it without importing each other."""
from typing import List, Optional

from pretrain.config.resolved import ResolvedRun

# lazy imports (pretrain.engine.mindformers): +~400 ms and numpy on every dry run; only its launch needs it


def engine_launches(run: ResolvedRun) -> List[Optional[str]]:
    """One msrun launch for our loop (it chains the phases itself); one per phase for MindFormers'
    engine, whose trainer runs once per process (pretrain/engine/mindformers.py)."""
    return list(run.phase_names) if run.engine == "mindformers" else [None]


def remaining_launches(run: ResolvedRun) -> List[Optional[str]]:
    """engine_launches less MindFormers' phases already finished (their final checkpoint is there):
    what a start or a restart of the job still launches ([] : nothing left)."""
    if run.engine != "mindformers":
        return [None]
    from pretrain.engine.mindformers import unfinished
    return list(unfinished(run, list(run.phase_names)))
