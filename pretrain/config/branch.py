"""A later phase run alone is a branch of the base run. Pure Python: the config resolves its name.

The base run is what `python -m pretrain` (phase=all) writes for the same model, parallel layout
and hardware: runs/<model>-<parallel>-<hardware> (train.init_from's default). `phase=reasoning` or
`phase=anneal` alone starts from the previous phase's final checkpoint of the base run (or of the
run or checkpoint train.init_from names) and writes its own run dir,
runs/<model>-<parallel>-<hardware>-<phase>[-lr<peak>]: a branch never writes into the base run,
and two branches with different peaks (an LR search by hand) never resume each other's
checkpoints. In a sweep each job has its own ${hydra.sweep.dir}/<num> dir anyway.

The first curriculum phase alone at its default peak (phase=general) has nothing to branch from:
it is the base run's first stage and writes the base run dir, so `phase=general` then `phase=all`
(or `phase=reasoning`) continues the same curriculum.
"""
from typing import Any, Optional, Sequence

CURRICULUM = ("general", "reasoning", "anneal")  # conf/phase/all.yaml's order


def previous_phase(name: str) -> Optional[str]:
    """The curriculum phase a phase run alone continues from (None for the first)."""
    return CURRICULUM[CURRICULUM.index(name) - 1] if name in CURRICULUM[1:] else None


def branches_from(phases: Sequence[str]) -> Optional[str]:
    """The phase whose final checkpoint a run of `phases` starts from: the predecessor of a phase run
    alone; None for the curriculum or the first phase (they may start fresh)."""
    return previous_phase(phases[0]) if len(phases) == 1 else None


def base_command(cfg: Any) -> str:
    """The command that trains the base run a branch of `cfg` starts from."""
    m, p, h = cfg.model.name, cfg.parallel.name, cfg.hardware.name
    return f"python -m pretrain model={m} parallel={p} hardware={h}"


def run_suffix(phase: Any, lr_peak: float) -> str:
    """What run_name adds to <model>-<parallel>-<hardware> for this phase selection (resolver
    pt.branch): '' for the base run, '-reasoning' or '-reasoning-lr3e-05' for a branch."""
    if "name" not in phase:  # the curriculum mapping (phase=all): the base run itself
        return ""
    name, peak = str(phase.name), phase.lr.peak
    if previous_phase(name) is None and (peak is None or float(peak) == float(lr_peak)):
        return ""
    return f"-{name}" + (f"-lr{float(peak):g}" if peak is not None else "")
