"""Where a starting run continues from: auto-resume, and the hand-off between phases.

A run directory that holds checkpoints is continued, never silently restarted. The newest
checkpoint that verifies (CheckpointManager.latest() logs each newer one it passes over as a
`fallback`, with the reason) is either
  - this run's own progress (its phase is one this run trains): resume from it, or
  - for a phase run alone (phase=reasoning): the previous curriculum phase's final checkpoint,
    which the phase hands off from (its schedule starts from that checkpoint's LR).
Anything else is a one-line error naming the checkpoint and what to do.
"""
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

from pretrain.config.errors import PretrainRunError
from pretrain.resilience.checkpoint import CheckpointInfo, CheckpointManager, read_state


@dataclass(frozen=True)
class Start:
    info: CheckpointInfo
    handoff: bool  # True: the previous phase's final checkpoint; False: this run's own progress


def find_start(phases: Sequence[str], previous: Optional[str],
               checkpoints: CheckpointManager) -> Optional[Start]:
    """`phases`: the phases this run trains, in order; `previous`: the phase a phase run alone
    continues from (None: the run may start fresh). None means a fresh start."""
    info = checkpoints.latest()
    if info is None:
        if previous is not None:
            raise PretrainRunError(
                f"phase={phases[0]} continues from the {previous} phase's final checkpoint, but "
                f"{checkpoints.directory} has none: run phase={previous} first with the same run_dir "
                f"(or phase=all)"
            )
        return None
    state = read_state(info)
    phase = state.get("phase")
    if phase in phases:
        return Start(info, handoff=False)
    if previous is not None and phase == previous and previous in state.get("phases_done", []):
        return Start(info, handoff=True)
    if previous is not None and phase == previous:
        raise PretrainRunError(
            f"phase={phases[0]} continues from the {previous} phase's final checkpoint, but the newest "
            f"checkpoint in {checkpoints.directory} is {info.path.name}, in the middle of {previous}: run "
            f"phase={previous} again with the same run_dir to finish it first"
        )
    raise PretrainRunError(
        f"{checkpoints.directory} holds checkpoints of phase {phase} (newest: {info.path.name}), which "
        f"this run (phases {list(phases)}) does not train: use another run_dir, or the phase "
        f"selection that wrote them"
    )


def config_changes(saved: Optional[Dict[str, Any]], current: Dict[str, Any]) -> List[str]:
    """Dotted keys whose values differ between the config a checkpoint was written with and this
    run's (a resumed run is only the same run when this is empty)."""
    if saved is None:
        return []
    old, new = _flatten(saved), _flatten(current)
    return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))


def _flatten(tree: Any, prefix: str = "") -> Dict[str, Any]:
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: Dict[str, Any] = {}
    for key, value in tree.items():
        out.update(_flatten(value, f"{prefix}{key}." if isinstance(value, dict) else f"{prefix}{key}"))
    return out
