"""Where a starting run continues from: auto-resume, and the hand-off between phases.

A run directory that holds checkpoints is continued, never silently restarted. The newest
checkpoint that verifies (CheckpointManager.latest() logs each newer one it passes over as a
`fallback`, with the reason) is either
  - this run's own progress (its phase is one this run trains): resume from it, or
  - for a phase run alone (phase=reasoning): the previous curriculum phase's final checkpoint,
    which the phase hands off from (its schedule starts from that checkpoint's LR).
Anything else is a one-line error naming the checkpoint and what to do.

A phase run alone whose own directory holds no checkpoint yet is a branch (pretrain/config/
branch.py): it hands off from the previous phase's final checkpoint of the base run that
train.init_from names (a run dir, its checkpoints/ dir, or one checkpoint dir). The base run is
only read, never written: a branch saves into its own run dir, and a restarted branch resumes
from there.
"""
import json
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from omegaconf import OmegaConf

from pretrain.config.branch import base_command, branches_from
from pretrain.config.errors import PretrainRunError
from pretrain.config.frozen import flatten
from pretrain.config.resolved import ResolvedRun
from pretrain.resilience.checkpoint import MANIFEST, CheckpointInfo, CheckpointManager, read_state, verify
from pretrain.resilience.identity import architecture, final_tag


@dataclass(frozen=True)
class ResumePoint:
    info: CheckpointInfo
    handoff: bool  # True: the previous phase's final checkpoint; False: this run's own progress


def find_start(phases: Sequence[str], previous: Optional[str], checkpoints: CheckpointManager,
               init_from: Optional[str] = None, train_first: str = "") -> Optional[ResumePoint]:
    """`phases`: the phases this run trains, in order; `previous`: the phase a phase run alone
    continues from (None: the run may start fresh); `init_from`: where such a run finds that
    phase's final checkpoint when its own directory has none (`train_first`: the command that
    trains it). None means a fresh start."""
    info = checkpoints.latest()
    if info is None:
        if previous is not None and init_from is not None:
            return ResumePoint(branch_point(phases[0], previous, init_from, train_first), handoff=True)
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
        return ResumePoint(info, handoff=False)
    if previous is not None and phase == previous and previous in state.get("phases_done", []):
        return ResumePoint(info, handoff=True)
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
# batch, token budget, seed, layout) makes it another run, and is refused; so is a key the
# checkpoint's config lacks (added with `+`, or by a newer pretrain: what the checkpoint trained
# with is unknown, e.g. data.document_mask) unless it is one of these.
RESUMABLE = (
    "phase.lr.*", "phase.*.lr.*", "train.lr_peak", "model.lr_peak",
    "train.log_every", "train.eval_every", "train.eval_batches",
    "train.save_every_steps", "train.save_every_minutes", "train.keep_checkpoint_max",
    "resilience.*",
    "hardware.master_addr", "hardware.master_port", "hardware.min_devices",
    "data.workers", "launcher", "run_name",
)
# A different data-parallel size is the same run (the elastic rule: the global batch stays, the data
# order is by global sample index, pretrain/data/loader.py), so when parallel.dp changes these keys
# may change with it: the layout's name and micro-batch, the grad_accum derived from them, the host
# the replicas run on (not data.num_shards: another shard count is another prepared dataset, whose
# rows differ; conf/data keeps it fixed whatever the dp), and
# train.init_from, whose default names the base run by its layout (read only by a branch that has
# no checkpoint of its own, which a resumed run has).
# Tensor/pipeline/context parallel and the global batch may not.
DP_CHANGE = (
    "parallel.dp", "parallel.name", "parallel.micro_batch_size", "train.grad_accum",
    "train.init_from",
    "hardware.name", "hardware.devices_per_node", "hardware.num_nodes", "hardware.memory_gb_per_device",
    "hardware.peak_tflops", "hardware.intra_node_gbps", "hardware.inter_node_gbps",
)
# What the data is made of: a change is a deliberate data change, accepted (and recorded) only with
# resilience.allow_data_change=true, which also accepts keys the checkpoint's config lacks (a
# checkpoint of an older pretrain). The prepared data itself is compared by identity.data_changes.
DATA_CHANGE = ("phase.mix.*", "phase.*.mix.*", "data.sources.*")
# Where the run is, not what it is: the worker sees run_dir as an absolute path, a moved run dir
# is the same run, and a frozen config of an accepted run always has dry_run=false.
NOT_THE_RUN = ("run_dir", "dry_run")


def resume_changes(saved: Optional[Dict[str, Any]], current: Dict[str, Any],
                   where: str) -> List[Tuple[str, Any, Any]]:
    """(key, checkpoint's value, this run's value) for every allowed change; a change outside
    RESUMABLE is one PretrainRunError line listing each such key (`where`: the checkpoint)."""
    if saved is None:
        return []
    saved, current = same_phase_shape(saved, current)
    old, new = flatten(saved), flatten(current)
    changed = [k for k in config_changes(saved, current) if k not in NOT_THE_RUN]
    allowed = RESUMABLE + (DP_CHANGE if "parallel.dp" in changed else ())
    deliberate = bool(new.get("resilience.allow_data_change"))
    allowed += DATA_CHANGE if deliberate else ()
    refused = [k for k in changed if not any(fnmatchcase(k, pattern) for pattern in allowed)
               and not (deliberate and k not in old)]
    if refused:
        listed = ", ".join(f"{k} ({old.get(k, '<absent>')!r} -> {new.get(k, '<absent>')!r})"
                           for k in refused[:8])
        listed += f" and {len(refused) - 8} more" if len(refused) > 8 else ""
        data = [k for k in refused if k not in old or any(fnmatchcase(k, p) for p in DATA_CHANGE)]
        data_fix = (" A key <absent> from the checkpoint's config (added with + or by a newer pretrain) or a "
                    "mixture/source change is a data change: resilience.allow_data_change=true accepts it "
                    "on purpose (logged)." if data else "")
        raise PretrainRunError(
            f"this run's config differs from the one {where} was written with in {listed}: a resume may "
            f"only change LR values, log/eval/save intervals, keep_checkpoint_max, resilience.*, the "
            f"rendezvous address and the data-parallel size with its derived keys (RESUMABLE and "
            f"DP_CHANGE in pretrain/resilience/resume.py).{data_fix} Give those keys their checkpoint's "
            f"values on the command line (run_dir/config.yaml is written from it, not read), or use "
            f"another run_dir for a new run" + _moved_cache(refused, old, new))
    return [(k, old.get(k), new.get(k)) for k in changed]


def _moved_cache(refused: List[str], old: Dict[str, Any], new: Dict[str, Any]) -> str:
    """A moved data cache resumes exactly through a link at its old path (the prepared data is found
    by content keys, and the config then names the path it was trained with): say so."""
    if "data.cache_dir" not in refused:
        return ""
    was, now = old["data.cache_dir"], new.get("data.cache_dir")
    return (f". If the data cache moved from {was} to {now}, it resumes exactly from a link at the old "
            f"path: ln -s {now} {was}, then run with data.cache_dir={was} (or PRETRAIN_CACHE={was})")


def same_phase_shape(saved: Dict[str, Any],
                     current: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """The two configs with their `phase` blocks in one shape. `phase=general` alone is the base run's
    first stage (pretrain/config/branch.py), so `phase=all` continues it, and `phase=general` resumes a
    curriculum stopped in general: one config holds that phase's block as `phase`, the other as
    `phase.general` beside the later phases. The single phase is compared with its namesake; the
    curriculum's other phases (not trained by the single-phase run) are taken as they are now."""
    old, new = saved.get("phase"), current.get("phase")
    if not isinstance(old, dict) or not isinstance(new, dict) or ("name" in old) == ("name" in new):
        return saved, current
    if "name" in old and old["name"] in new:              # phase=<first> alone, now the curriculum
        return {**saved, "phase": {**new, old["name"]: old}}, current
    if "name" in new and new["name"] in old:              # the curriculum, now its phase alone
        return saved, {**current, "phase": {**old, new["name"]: new}}
    return saved, current


# where a run continues from (None: it starts fresh) and the config changes it makes to that checkpoint's run
Continuation = Tuple[Optional[ResumePoint], List[Tuple[str, Any, Any]]]


def start_point(run: ResolvedRun, checkpoints: CheckpointManager) -> Continuation:
    """Where this run continues from, and the config changes it makes to its own checkpoint's run
    (each allowed by resume.RESUMABLE; any other raises). Run by the launcher before it replaces
    run_dir/config.yaml, and again by every rank, which may read a config.yaml edited since."""


    cfg, names = run.cfg, list(run.phase_names)
    # a later phase alone with no checkpoint of its own branches from train.init_from
    start = find_start(names, branches_from(names), checkpoints, init_from=cfg.train.init_from,
                       train_first=base_command(cfg))
    if start is None or start.handoff:   # a hand-off starts another phase: its config differs by design
        return start, []
    saved = read_state(start.info).get("config")
    now = OmegaConf.to_container(cfg, resolve=True)
    return start, resume_changes(saved, now, f"checkpoint {start.info.path}")


def check_branch(run: ResolvedRun) -> None:
    """Before data preparation and msrun: a branch with no checkpoint of its own must find the one
    it starts from, of this model (one line, exit 2, naming the run to train first)."""

    cfg, names = run.cfg, list(run.phase_names)
    previous, own = branches_from(names), Path(cfg.run_dir) / "checkpoints"
    if previous is None or cfg.train.init_from is None or (own.is_dir() and any(own.glob("step_*"))):
        return
    info = branch_point(names[0], previous, str(cfg.train.init_from), base_command(cfg))
    saved, mine = read_state(info).get("model"), architecture(cfg)
    if saved is None:  # a checkpoint without its architecture: the load itself checks the shapes
        return
    differ = [k for k in sorted(set(saved) | set(mine)) if saved.get(k) != mine.get(k)]
    if differ:
        k = differ[0]
        raise PretrainRunError(f"phase={names[0]} branches from {info.path}, a model with "
                               f"model.{k}={saved.get(k)}, but this run has model.{k}={mine.get(k)}: give the "
                               f"branch the base run's model settings, or name another checkpoint with "
                               f"train.init_from=PATH")


def branch_point(phase: str, previous: str, init_from: str, train_first: str = "") -> CheckpointInfo:
    """The checkpoint a branch `phase` starts from: `init_from` itself when it is one checkpoint,
    else the newest verified final checkpoint of `previous` in that run's checkpoints. Read only."""
    path = Path(init_from)
    train_base = (f"train it first ({train_first or 'python -m pretrain'}, with the same model overrides), "
                  f"or name a checkpoint with train.init_from=PATH")
    if not path.is_dir():
        raise PretrainRunError(f"phase={phase} is a branch of the base run {init_from} (train.init_from) and "
                               f"starts from its {previous} phase's final checkpoint, but there is no such "
                               f"run: {train_base}")
    if (path / MANIFEST).is_file():  # one checkpoint, named by the user
        problem = verify(path)
        if problem is not None:
            raise PretrainRunError(f"train.init_from={init_from} does not verify ({problem}): name another "
                                   f"checkpoint")
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
        return CheckpointInfo(step=int(manifest["step"]), path=path, tag=manifest.get("tag"),
                              created=float(manifest.get("created", 0.0)), verified=True)
    directory = path / "checkpoints" if (path / "checkpoints").is_dir() else path
    found = CheckpointManager(directory, keep_latest=1).list()  # newest first, not verified
    tag = final_tag(previous)
    for info in (i for i in found if i.tag == tag):
        if verify(info.path) is None:
            return CheckpointInfo(info.step, info.path, info.tag, info.created, verified=True)
    newest = f" (newest: {found[0].path.name})" if found else ""
    raise PretrainRunError(f"phase={phase} is a branch of the base run {init_from} (train.init_from) and "
                           f"starts from its {previous} phase's final checkpoint, but {directory} has no "
                           f"verified {tag} checkpoint{newest}: {train_base}")


def config_changes(saved: Optional[Dict[str, Any]], current: Dict[str, Any]) -> List[str]:
    """Dotted keys whose values differ between the config a checkpoint was written with and this
    run's (a resumed run is only the same run when this is empty)."""
    if saved is None:
        return []
    old, new = flatten(saved), flatten(current)
    return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
