"""`python -m pretrain.engine.mindformers RUN_DIR [PHASE]`: MindFormers' own trainer on the run's
per-phase yamls (run_dir/mindformers_<phase>.yaml), for the layouts our loop does not run.

What MindFormers' run script (run_mindformer.py) does, for one rank, reading only the frozen run
dir: MindFormerConfig(yaml) -> build_context -> (on CPU) pretrain/model/cpu_compat.py -> register
our LR class, shard loader and loss log -> Trainer(config).train(). Phases run in order, each in a
process of its own (MindFormers builds one Trainer per process); a phase whose own checkpoints exist
resumes from the newest (with data skip), a finished phase is skipped.
Launchers reach it through pretrain.worker (msrun, node scripts, Slurm) or in-process (one device),
which dispatch on the resolved run's engine (the layout decides: config/layout.py).
"""

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from omegaconf import OmegaConf

from pretrain.config import validate
from pretrain.config.errors import USER_ERRORS, PretrainRunError
from pretrain.config.resolved import ResolvedRun
from pretrain.engine import callbacks, dataset, lr, phases as engine_phases
from pretrain.engine.callbacks import read_log
from pretrain.io import write_atomic
from pretrain.model import cpu_compat, sandwich
from pretrain.model.builder import prepare_environment
from pretrain.plan.measured import plan_of, record_calibration
from pretrain.train import ranks
from pretrain.train.measure import calibration_peak_gb

# lazy imports (mindspore, mindformers): by design, their 3-10 s import stays out of planning and dry runs


def register_all() -> None:

    lr.register()
    dataset.register()
    callbacks.register()
    sandwich.register()   # the DSSN model class that mindformers_<phase>.yaml names for sandwich_norm


def newest_checkpoint_step(ckpt_dir: Path) -> int:
    """The phase step of rank 0's newest checkpoint in ckpt_dir (0 when none): the step_num
    MindFormers stores in it (file names and meta.json count the steps of the start that wrote it)."""
    if not (ckpt_dir / "rank_0" / "meta.json").is_file():
        return 0
    import mindspore as ms

    saved = ms.load_checkpoint(
        str(newest_checkpoint_file(ckpt_dir)), format="safetensors", choice_func=lambda k: k == "step_num"
    )
    return int(saved["step_num"].asnumpy()) if "step_num" in saved else 0


def phase_config(run_dir: Path, phase: str) -> Any:
    """The phase's yaml as MindFormers loads it, pointed at the phase's own checkpoints when a
    previous start left some (resume with data skip), else as exported."""
    from mindformers.tools.register import MindFormerConfig

    path = engine_phases.yaml_path(run_dir, phase)
    if not path.is_file():
        raise PretrainRunError(
            f"{path}: no such file; the launch writes it (python -m pretrain ... with this run_dir)"
        )
    config = MindFormerConfig(str(path))
    own = engine_phases.checkpoint_dir(run_dir, phase)
    if newest_checkpoint_step(own) > 0:
        config.load_checkpoint = str(own)
        config.resume_training = True
        config.ignore_data_skip = False
    if config.load_checkpoint and not config.use_parallel:
        # one device: MindFormers 1.9.0 refuses the per-rank root ("when input checkpoint file is rank
        # dir, Please set use_parallel: True"), a file when resuming (trainer/utils.py
        # validate_checkpoint_config wants a directory) and rank_0/ (load_resume_context_from_checkpoint
        # looks for rank_* in it); it takes its "complete safetensors" layout: a directory of the weights
        # and hyper_param.safetensors with the resume context
        config.load_checkpoint = str(complete_checkpoint_dir(Path(config.load_checkpoint), run_dir, phase))
    return config


RESUME_KEYS = ("loss_scale", "epoch_num", "step_num", "global_batch_size")


def complete_checkpoint_dir(ckpt_dir: Path, run_dir: Path, phase: str) -> Path:
    """RUN_DIR/mindformers/<phase>/resume/: the newest checkpoint of ckpt_dir (a hard link) and
    hyper_param.safetensors holding its resume context, replaced atomically."""

    import mindspore as ms

    src = newest_checkpoint_file(ckpt_dir)
    out = engine_phases.output_dir(run_dir, phase) / "resume"
    tmp = out.with_name(f".resume-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        os.link(src, tmp / src.name)
    except OSError:  # another filesystem
        shutil.copy2(src, tmp / src.name)
    context = ms.load_checkpoint(str(src), format="safetensors", choice_func=lambda k: k in RESUME_KEYS)
    ms.save_checkpoint(
        [{"name": k, "data": v} for k, v in context.items()],
        str(tmp / "hyper_param.safetensors"),
        format="safetensors",
    )
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def newest_checkpoint_file(ckpt_dir: Path) -> Path:
    """Rank 0's copy of the checkpoint MindFormers 1.9.0 resumes from (tools/resume_ckpt.py
    get_info_from_meta): of every rank's meta.json, the oldest (epoch, step) - meta.json is
    rewritten (atomically) only after that rank's file is complete (CheckpointMonitor: at once, or
    when an async save finished), so a rank killed mid-save leaves its previous one named, and a
    checkpoint counts only once every rank has it. Rank 0's decides which phase is finished, where
    a phase resumes and the steps a restart loses, so all three agree with what MindFormers loads."""
    meta = ckpt_dir / "rank_0" / "meta.json"
    if not meta.is_file():
        raise PretrainRunError(
            f"{ckpt_dir}: no checkpoint to continue from (no rank_0/meta.json); train the "
            f"previous phase first"
        )
    named = []
    for rank_dir in ckpt_dir.glob("rank_*"):
        try:
            m = json.loads((rank_dir / "meta.json").read_text())
            named.append(((int(m["last_epoch"]), int(m["last_step"])), str(m["last_ckpt_file"])))
        except (OSError, ValueError, KeyError, TypeError):  # MindFormers skips those too
            continue
    name = min(named)[1] if named else json.loads(meta.read_text())["last_ckpt_file"]
    return ckpt_dir / "rank_0" / re.sub(r"_rank_\d+", "_rank_0", name)


def unfinished(run: ResolvedRun, names: Optional[List[str]] = None) -> List[str]:
    """The phases (of `names`, default all of the run's) whose own newest checkpoint is short of
    the phase's steps, in order: a finished phase is never trained again (its final checkpoint
    starts the next)."""
    run_dir = run.run_dir.resolve()
    exported = engine_phases.export_phases(run)
    names = list(exported) if names is None else names
    return [n for n in names if newest_checkpoint_step(engine_phases.checkpoint_dir(run_dir, n))
            < int(exported[n]["pretrain_phase"]["steps"])]


def steps_lost(run: ResolvedRun) -> Tuple[Optional[int], Optional[int]]:
    """(last step the phase in progress logged, the step its restart resumes from), in the phase's
    own steps (PretrainLossLog's): the steps between them train again. (None, None) when every
    phase is finished."""

    run_dir = run.run_dir.resolve()
    todo = unfinished(run)
    if not todo:
        return None, None
    logged = [int(r["step"]) for r in read_log(run_dir, todo[0])]
    return (max(logged) if logged else None), newest_checkpoint_step(
        engine_phases.checkpoint_dir(run_dir, todo[0]))


def run_phase(run: ResolvedRun, phase: str) -> Dict[str, Any]:
    from mindformers import Trainer
    from mindformers.core.context.build_context import build_context

    cfg, run_dir = run.cfg, run.run_dir.resolve()
    config = phase_config(run_dir, phase)
    resumed_at = newest_checkpoint_step(engine_phases.checkpoint_dir(run_dir, phase))
    for cb in config.callbacks:
        if cb["type"] == "PretrainLossLog":  # steps of this start count from where it resumed
            cb["first_step"] = resumed_at
    build_context(config)
    if cfg.hardware.device == "cpu":

        cpu_compat.apply()
    register_all()

    earlier = len(read_log(run_dir, phase))  # rows of earlier starts (a killed one's last steps too)
    started = time.perf_counter()
    Trainer(config).train()
    wall = time.perf_counter() - started
    log = read_log(run_dir, phase)[earlier:]
    per_step = int(cfg.train.global_batch_size) * int(cfg.model.seq_length)
    # after the first step (graph compilation), like our loop's Throughput
    timed = log[-1]["time"] - log[0]["time"] if len(log) > 1 else 0.0
    step_times = [b["time"] - a["time"] for a, b in zip(log, log[1:])]

    if step_times and ranks.writes_run_files():   # this hardware's calibration point for MindFormers' step

        record_calibration(run, plan_of(run), statistics.median(step_times), calibration_peak_gb(cfg))
    return {
        "phase": phase,
        "resumed_at": resumed_at,
        "steps": len(log),
        "loss_first": log[0]["loss"] if log else None,
        "loss_last": log[-1]["loss"] if log else None,
        "wall_s": wall,
        "tokens_per_s": (len(log) - 1) * per_step / timed if timed > 0 else 0.0,
    }


def train_rank(resolved: ResolvedRun, only: Optional[str] = None, checked: bool = False) -> Dict[str, Any]:
    """Train the run's phases (or one) with MindFormers' trainer; the summary our launchers read.
    `checked`: the launcher in this process checked the config and set the environment."""

    cfg, run_dir = resolved.cfg, resolved.run_dir.resolve()
    if not checked:
        prepare_environment(str(run_dir))
        validate.check(cfg)
    validate.check_trainable(cfg)
    names: List[str] = list(resolved.phase_names)
    if only is not None:
        if only not in names:
            raise PretrainRunError(
                f"phase {only!r} is not a phase of the run in {run_dir} ({', '.join(names)})"
            )
        names = [only]
    todo = unfinished(resolved, names)  # a done phase's final checkpoint starts the next
    results = []
    if len(todo) > 1:
        # MindFormers 1.9.0 builds one Trainer per process: a second one fails on its module-level state
        # ("Parameter 'indexer_loss' already registered"), so each phase is a process of its own: here
        # (one device) a child; under msrun the launcher starts one launch per phase (PHASE argument).
        if validate.num_devices(cfg.hardware) > 1:
            raise PretrainRunError(
                f"train.engine=mindformers trains one phase per launch on several devices; "
                f"pass the phase: python -m pretrain.worker {run_dir} {todo[0]}"
            )
        for name in todo:
            subprocess.run(
                [sys.executable, "-m", "pretrain.engine.mindformers", str(run_dir), name], check=True
            )
            results.extend(json.loads((run_dir / "summary.json").read_text())["phases"])
    elif todo:
        results.append(run_phase(resolved, todo[0]))
    summary = {"run_dir": str(run_dir), "engine": "mindformers", "phases": results}

    if ranks.writes_run_files():

        write_atomic(run_dir / "summary.json", json.dumps(summary, indent=2))
    summary["rank_evidence"] = {"loss_last": results[-1]["loss_last"] if results else None}
    return summary


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not 1 <= len(args) <= 2 or not (Path(args[0]) / "config.yaml").is_file():
        print(
            "usage: python -m pretrain.engine.mindformers RUN_DIR [PHASE]  (RUN_DIR holds the frozen "
            "config.yaml and mindformers_<phase>.yaml)",
            file=sys.stderr,
        )
        return 2
    cfg = OmegaConf.load(Path(args[0]) / "config.yaml")
    cfg.run_dir = str(Path(args[0]).resolve())

    try:
        train_rank(ResolvedRun.of(cfg), args[1] if len(args) > 1 else None)
    except USER_ERRORS as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
