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
from fnmatch import fnmatchcase
from typing import Any, Dict, List, Optional, Sequence, Tuple

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


# The one list of config keys a resumed run may change (dotted, fnmatch patterns): learning-rate
# values, cadences, retention, guard thresholds and timeouts, the rendezvous port. Each change is
# accepted and recorded as a `config_change` event. Any other difference (architecture, data,
# batch, token budget, seed, layout) makes it another run, and is refused; a key the checkpoint's
# config does not have yet (added by a newer version) is accepted and recorded.
RESUMABLE = (
    "phase.lr.*", "phase.*.lr.*", "train.lr_peak", "model.lr_peak",
    "train.log_every", "train.eval_every", "train.eval_batches",
    "train.save_every_steps", "train.save_every_minutes", "train.keep_checkpoint_max",
    "resilience.*",
    "hardware.master_addr", "hardware.master_port",
    "data.workers", "launcher", "run_name",
)
# Where the run is, not what it is: the worker sees run_dir as an absolute path, a moved run dir
# is the same run, and a frozen config of an accepted run always has dry_run=false.
NOT_THE_RUN = ("run_dir", "dry_run")


def resume_changes(saved: Optional[Dict[str, Any]], current: Dict[str, Any],
                   where: str) -> List[Tuple[str, Any, Any]]:
    """(key, checkpoint's value, this run's value) for every allowed change; a change outside
    RESUMABLE is one PretrainRunError line listing each such key (`where`: the checkpoint)."""
    if saved is None:
        return []
    old, new = _flatten(saved), _flatten(current)
    changed = [k for k in config_changes(saved, current) if k not in NOT_THE_RUN]
    # A key the checkpoint's config lacks is one a newer pretrain added: the user cannot restore it,
    # so it is accepted and recorded like an allowed change.
    refused = [k for k in changed if k in old and not any(fnmatchcase(k, pattern) for pattern in RESUMABLE)]
    if refused:
        listed = ", ".join(f"{k} ({old.get(k, '<absent>')!r} -> {new.get(k, '<absent>')!r})"
                           for k in refused[:8])
        listed += f" and {len(refused) - 8} more" if len(refused) > 8 else ""
        raise PretrainRunError(
            f"this run's config differs from the one {where} was written with in {listed}: a resume may "
            f"only change LR values, log/eval/save intervals, keep_checkpoint_max, resilience.* and the "
            f"rendezvous address (RESUMABLE in pretrain/resilience/resume.py). Restore those keys "
            f"(run_dir/config.yaml or the command line), or use another run_dir for a new run")
    return [(k, old.get(k), new.get(k)) for k in changed]


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
