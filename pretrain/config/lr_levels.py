"""The LR levels a curriculum passes through, from the phases' `lr` blocks alone (no step counts).

The rules read them (a continuing phase's lr.end must not exceed where the previous one ends) and
so does the schedule (pretrain/train/schedule.py), which adds the steps: one arithmetic for both."""
from typing import Any, List, Sequence, Tuple


def end_lr(lr_cfg: Any, peak: float) -> float:
    """phase.lr.end when set, else peak x phase.lr.end_ratio (for a continuing phase, peak is the LR
    the previous phase ended at)."""
    end = getattr(lr_cfg, "end", None)
    return float(end) if end is not None else float(peak) * float(getattr(lr_cfg, "end_ratio", 0.1))


def levels(phases: Sequence[Any], start: float = 0.0) -> List[Tuple[float, float]]:
    """(peak, end) of each phase of a chain, each continuing phase from the previous one's end: the
    LR levels a curriculum passes through, independent of the phases' step counts."""
    out: List[Tuple[float, float]] = []
    for phase in phases:
        begin = out[-1][1] if out else start
        peak = begin if phase.lr.peak is None else float(phase.lr.peak)
        out.append((peak, end_lr(phase.lr, peak)))
    return out
