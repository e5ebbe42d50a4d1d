"""One MindFormers yaml per phase: run_dir/mindformers_<phase>.yaml (pure Python, no mindspore); and
run_dir/mindformers.yaml, the first phase alone over its shard files, once the data is prepared.

Each is mindformers_config.export(...) of the run (model, parallel, context, optimizer, wrapper)
with what makes the phase a continuation of the curriculum, in MindFormers 1.9.0's (legacy
checkpoint format) keys, read from mindformers/trainer/base_trainer.py and trainer/utils.py:
- lr_schedule: our schedule of the phase as `PretrainPhaseLR` (pretrain/engine/lr.py), keyed by
  the optimizer's global step, which continues across phases: the same function of the step as
  our loop's.
- output_dir: run_dir/mindformers/<phase>; CheckpointMonitor writes per-rank shards under
  <output_dir>/checkpoint/rank_<r>/ every train.save_every_steps, keeping train.keep_checkpoint_max.
- load_checkpoint + resume_training: the previous phase's checkpoint directory (weights, optimizer
  moments and global step, so the LR continues) with ignore_data_skip (the new phase reads its own
  data from its first sample). The entry (pretrain/engine/mindformers.py) points load_checkpoint
  at the phase's own checkpoints instead when they exist (a restart resumes, with data skip).
- auto_trans_ckpt: true when the previous phase's strategy differs (MindFormers reshards the
  per-rank shards into this layout); model-parallel layouts save their strategy file.
- train_dataset: our MindRecord shards through `PretrainShardLoader` (pretrain/engine/dataset.py).
"""

from pathlib import Path
from typing import Any, Dict, List, Optional

from omegaconf import DictConfig, OmegaConf

from pretrain.config.branch import CURRICULUM, previous_phase
from pretrain.config.layout import mindformers_checkpoint_dir, mindformers_output_dir
from pretrain.config.resolved import ResolvedRun
from pretrain.engine.lr import lr_block
from pretrain.io import write_atomic
from pretrain.model import mindformers_config as mfc
from pretrain.train.schedule import PhaseLR, curriculum


def yaml_path(run_dir: Path, phase: str) -> Path:
    return Path(run_dir) / f"mindformers_{phase}.yaml"


def output_dir(run_dir: Path, phase: str) -> Path:
    return mindformers_output_dir(run_dir, phase)


def checkpoint_dir(run_dir: Path, phase: str) -> Path:
    return mindformers_checkpoint_dir(run_dir, phase)


def schedules(run: ResolvedRun) -> List[PhaseLR]:
    """The run's phases' LR schedules. A phase run alone after the first starts from the LR the
    previous phase ended at: read from that phase's yaml in this run dir when it is there (the run
    that trained it wrote it), else assumed to be train.lr_peak (a dry run of the phase alone)."""
    plist = run.phases
    start = 0.0
    if len(plist) == 1 and plist[0].node.lr.peak is None:
        start = previous_final_lr(run) or float(run.cfg.train.lr_peak)
    return curriculum([p.node for p in plist], [p.steps for p in plist], start=start)


def previous_final_lr(run: ResolvedRun) -> Optional[float]:


    prev = previous_phase(run.phases[0].name)
    path = yaml_path(run.run_dir, prev) if prev else None
    if path is None or not path.is_file():
        return None
    block = OmegaConf.to_container(OmegaConf.load(path).lr_schedule)
    return PhaseLR(**{k: block[k] for k in PhaseLR.__dataclass_fields__}).final


def first_steps(run: ResolvedRun, lrs: List[PhaseLR]) -> List[int]:
    """The optimizer step each phase starts at: the steps of the phases before it in the curriculum
    (for a phase run alone, those recorded in the previous phases' yamls of this run dir)."""
    out, at = [], 0
    if len(run.phases) == 1:
        at = _steps_before(run)
    for lr in lrs:
        out.append(at)
        at += lr.steps
    return out


def _steps_before(run: ResolvedRun) -> int:


    name = run.phases[0].name
    if name not in CURRICULUM:
        return 0
    total = 0
    for prev in CURRICULUM[: CURRICULUM.index(name)]:
        path = yaml_path(run.run_dir, prev)
        if path.is_file():
            total += int(OmegaConf.load(path).lr_schedule.steps)
    return total


def export_phases(run: ResolvedRun, pad_token_id: int = 0,
                  lrs: Optional[List[PhaseLR]] = None) -> Dict[str, Dict[str, Any]]:
    """{phase name: the mindformers yaml as a dict} for every phase this run trains (`lrs`: the run's
    schedules, when the caller has them)."""
    cfg, run_dir, plist = run.cfg, run.run_dir, run.phases
    lrs = schedules(run) if lrs is None else lrs
    starts = first_steps(run, lrs)
    out: Dict[str, Dict[str, Any]] = {}

    for i, (phase, lr, first) in enumerate(zip(plist, lrs, starts)):
        name = phase.name
        prev = plist[i - 1].name if i else previous_phase(name) if len(plist) == 1 else None
        y = mfc.export(
            cfg,
            first_phase=phase.node,
            first_phase_steps=lr.steps,
            first_phase_peak=lr.peak,
            pad_token_id=pad_token_id,
            run_dir=str(Path(run_dir).resolve()),
            phase_name=name,
        )
        y["lr_schedule"] = lr_block(lr, first)
        y["output_dir"] = str(output_dir(run_dir, name))
        y["load_checkpoint"] = str(checkpoint_dir(run_dir, prev)) if prev else ""
        y["resume_training"] = bool(prev)
        y["ignore_data_skip"] = bool(prev)  # a new phase reads its own data from its first sample
        y["auto_trans_ckpt"] = run.layout.semi_auto  # per-rank shards resharded when the layout changed
        y["load_ckpt_format"] = "safetensors"
        y["runner_config"]["epochs"] = 1  # one pass over the phase's samples = the phase's steps
        resilience(cfg, y)
        y["callbacks"].append(
            {"type": "PretrainLossLog", "path": str(output_dir(run_dir, name) / "losses.jsonl")}
        )
        y["pretrain_phase"] = {"name": name, "steps": lr.steps, "first_step": first, "previous": prev or None}
        out[name] = y
    return out


def resilience(cfg: DictConfig, y: Dict[str, Any]) -> None:
    """Our resilience keys, mapped onto what MindFormers 1.9.0 has (docs/mindformers.md lists the rest):
    - non-finite steps: MFTrainOneStepCell skips the update when the gradients overflow (its loss
      scaler, runner_wrapper.scale_sense); check_for_nan_in_loss_and_grad stays off, since it stops
      the run at the first NaN loss where resilience.max_nonfinite_in_row allows skips.
    - resilience.async_save -> CheckpointMonitor.async_save.
    - loss / global-norm monitoring: MFLossMonitor prints both every step; PretrainLossLog records them.
    - data skip: MindFormers skips the samples a resumed run already trained (dataset.set_init_step);
      a new phase starts at its first sample (ignore_data_skip)."""
    y["check_for_nan_in_loss_and_grad"] = False
    for cb in y["callbacks"]:
        if cb["type"] == "CheckpointMonitor":
            cb["async_save"] = bool(cfg.resilience.async_save)


def write_phases(run: ResolvedRun, pad_token_id: int = 0,
                 prepared: Optional[Dict[str, Any]] = None) -> List[Path]:
    """Every phase's mindformers_<phase>.yaml; with the data prepared, also run_dir/mindformers.yaml:
    the run's first phase as one yaml over its shard files, for MindFormers' own run script."""
    written, lrs = [], schedules(run)   # once: a phase run alone reads the previous phase's yaml for it
    for name, y in export_phases(run, pad_token_id, lrs).items():
        path = yaml_path(run.run_dir, name)
        write_atomic(path, mfc.to_yaml(y))
        written.append(path)
    if prepared is not None:
        first = run.phases[0]
        single = mfc.export(
            run.cfg,
            first_phase=first.node,
            first_phase_steps=first.steps,
            first_phase_peak=lrs[0].peak,
            train_files=[str(f) for name in first.node.mix for f in prepared[name].train_shards],
            pad_token_id=pad_token_id,
        )
        written.append(run.run_dir / "mindformers.yaml")
        write_atomic(written[-1], mfc.to_yaml(single))
    return written
