"""`run(cfg)`: train the composed config's phases in this process and return the run's summary.

The recipe: prepare data -> check it fits the model -> build the MindFormers model -> resume from
the run directory's newest good checkpoint (or, for a later phase run alone, branch from the
previous phase's final checkpoint of the base run: pretrain/config/branch.py) -> chain the phases'
LR schedules -> export mindformers.yaml -> train each phase under the resilience guards (signals,
watchdog, spike / non-finite guards) -> plot, summarise.
Under msrun every rank calls it with RANK_ID / RANK_SIZE set; rank 0 writes the run's files, every
rank loads the same checkpoint.
"""

import json
import shlex
import sys
import time
import zlib
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from omegaconf import DictConfig, OmegaConf

from pretrain.config import validate
from pretrain.config.validate import phase_steps, phases
from pretrain.data.checks import check_prepared
from pretrain.io import write_atomic
from pretrain.model import builder, mindformers_config
from pretrain.plan.planner import flops_per_token, model_shape
from pretrain.resilience import guards as resilience
from pretrain.resilience.checkpoint import CheckpointManager, read_state
from pretrain.resilience.events import EventLog
from pretrain.resilience.identity import architecture, architecture_hash, final_tag
from pretrain.resilience.resume import Start, find_start, resume_changes
from pretrain.resilience.signals import GracefulStop
from pretrain.train import ranks
from pretrain.config.branch import base_command, branches_from
from pretrain.train.metrics import METRICS_FILE, MetricsWriter
from pretrain.train.plot import plot_curves
from pretrain.train.schedule import curriculum
from pretrain.train.trainer import PhasePlan, Throughput, Trainer

def pad_token_id(tokenizer_path: str) -> int:
    """The tokenizer's padding id, -1 when it has none (then no token is masked out as padding;
    the loader's loss mask still excludes padded positions)."""
    from pretrain.data.tokenizer import load

    return int(load(Path(tokenizer_path)).pad_id())


def phase_seed(cfg: DictConfig, name: str) -> int:
    # The same phase samples the same batches whether it runs alone or inside the curriculum.
    return int(cfg.train.seed) + zlib.crc32(name.encode()) % 100003


def run(cfg: DictConfig) -> Dict[str, Any]:
    started = time.perf_counter()
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    builder.prepare_environment(str(run_dir))  # before anything imports mindspore / mindformers
    plist = phases(cfg)
    validate.check(cfg)            # the frozen config is what ranks train: the launch's rules hold here too
    validate.check_trainable(cfg)
    steps = [phase_steps(cfg, ph) for ph in plist]
    logging_rank = ranks.is_logging_rank()
    events = EventLog(run_dir / "events.jsonl") if logging_rank else None
    checkpoints = CheckpointManager(
        run_dir / "checkpoints",
        keep_latest=int(cfg.train.keep_checkpoint_max),
        events=events,
        config_hash=architecture_hash(architecture(cfg)),
        async_save=bool(cfg.resilience.async_save),
        writer=logging_rank,
        start_fresh=bool(cfg.resilience.start_fresh),
    )
    start, changes = start_point(cfg, checkpoints)  # before the slow parts

    from pretrain.data.prepare import prepare

    prepared = prepare(cfg.data, progress=logging_rank)
    check_prepared(cfg, prepared)
    pad = pad_token_id(str(next(iter(prepared.values())).tokenizer_path))
    metrics = MetricsWriter(run_dir, enabled=logging_rank)
    trainer = build_trainer(cfg, pad, metrics, checkpoints, events)
    if start is not None:
        finished = {str(p.name) for p in plist} <= set(read_state(start.info).get("phases_done", []))
        resume(trainer, checkpoints, start, events, changes, announce=not finished)
    else:  # a fresh start runs every step again: one record per step (a crash before the first save)
        metrics.rewind(0)
    schedules = curriculum(plist, steps, start=trainer.state.lr_start)
    plans = phase_plans(cfg, prepared, plist, schedules)
    fed = ranks.RowLog()  # what this rank trained on, for its exit status (pretrain.worker)
    for plan in plans:
        plan.loader = fed.watch(plan.loader)
    if logging_rank:
        export_mindformers_yaml(cfg, run_dir, plist[0], steps[0], schedules[0].peak, prepared, pad)
        events.log("start", step=trainer.state.global_step, phases=[p.name for p in plans], steps=steps)
    try:
        with GracefulStop() as stop, resilience.watchdog(
            cfg.resilience, run_dir, events, rank=ranks.rank_info()[0]
        ) as dog:
            # every rank of the job agrees on a stop, so all of them stop after the same step
            trainer.stop, trainer.watchdog = ranks.agreed_stop(stop), dog
            results = trainer.run(plans)
    finally:
        metrics.close()
        checkpoints.close()
    summary = {
        "run_dir": str(run_dir),
        "phases": results,
        "global_step": trainer.state.global_step,
        "params": sum(int(p.size) for p in trainer.step.net.trainable_params()),
        "wall_s": time.perf_counter() - started,
    }
    if trainer.stopped:
        summary["stopped"] = trainer.stopped
    if logging_rank:
        if not trainer.stopped:
            events.log("finish", step=trainer.state.global_step, wall_s=round(summary["wall_s"], 2))
        events.close()
        if not results and not trainer.stopped:   # the finished run's summary.json stays as it was
            print(f"nothing to train: every phase of this run is already done ({checkpoints.directory}); "
                  f"use another run_dir to train again", flush=True)
        else:
            plot_curves(run_dir / METRICS_FILE, run_dir / "loss_curve.png")
            write_atomic(run_dir / "summary.json", json.dumps(summary, indent=2))
            print(format_summary(summary), flush=True)
        if trainer.stopped:
            print(resume_hint(trainer, checkpoints), flush=True)
    summary["rank_evidence"] = rank_evidence(trainer, fed, results)  # not in summary.json: this rank's
    return summary


def start_point(
    cfg: DictConfig, checkpoints: CheckpointManager
) -> Tuple[Optional[Start], List[Tuple[str, Any, Any]]]:
    """Where this run continues from, and the config changes it makes to its own checkpoint's run
    (each allowed by resume.RESUMABLE; any other raises). Run by the launcher before it replaces
    run_dir/config.yaml, and again by every rank, which may read a config.yaml edited since."""
    names = [str(p.name) for p in phases(cfg)]
    # a later phase alone with no checkpoint of its own branches from train.init_from
    start = find_start(names, branches_from(names), checkpoints, init_from=cfg.train.init_from,
                       train_first=base_command(cfg))
    if start is None or start.handoff:   # a hand-off starts another phase: its config differs by design
        return start, []
    saved = read_state(start.info).get("config")
    now = OmegaConf.to_container(cfg, resolve=True)
    return start, resume_changes(saved, now, f"checkpoint {start.info.path}")


def rank_evidence(trainer: Trainer, fed: ranks.RowLog, results: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The rows this rank trained on, the last loss it saw (the mean over the data-parallel ranks)
    and, for data-parallel replicas (which must end identical), a digest of its final weights."""
    out = {"data_parallel": trainer.step.data_parallel, **fed.evidence(),
           "loss_last": results[-1]["loss_last"] if results else None}
    if trainer.step.data_parallel > 1:
        out["params_sha256"] = ranks.params_digest(trainer.step.net)
    return out


def resume(
    trainer: Trainer, checkpoints: CheckpointManager, start: Start, events: Optional[EventLog],
    changes: List[Tuple[str, Any, Any]] = (), announce: bool = True,
) -> None:
    """Load the start checkpoint on this rank; log (and, when there is something left to train,
    print) where the run continues from."""
    loading = time.perf_counter()
    branched = start.handoff and Path(start.info.path).parent.resolve() != checkpoints.directory.resolve()
    state = trainer.restore(checkpoints, start.info)
    load_s = time.perf_counter() - loading
    if start.handoff:  # the phase's schedule starts from the LR the previous phase ended at
        state.lr_start = state.lr
        how = "continues from the previous phase's final checkpoint"
        if branched:
            how = "branches off the base run"
    else:
        how = f"resumes phase {state.phase} at step {state.phase_step}"
    if events is not None:
        for key, old, new in changes:
            events.log("config_change", step=state.global_step, key=key, old=old, new=new,
                       path=str(start.info.path))
        events.log("resume", step=state.global_step, phase=state.phase, phase_step=state.phase_step,
                   path=str(start.info.path), handoff=start.handoff, load_s=round(load_s, 3),
                   config_changed=[key for key, _, _ in changes])
        if announce:
            print(f"{how} from {start.info.path} (global step {state.global_step}, loaded in {load_s:.1f} s)",
                  flush=True)
        if changes:
            print("config changed since the checkpoint (allowed on resume, logged in events.jsonl): "
                  + ", ".join(f"{k} {old!r} -> {new!r}" for k, old, new in changes), flush=True)
    if branched:  # its own copy of where it started: it resumes and rolls back without the base run
        trainer.save(tag=final_tag(state.phase) if state.phase in state.phases_done else None)


def resume_hint(trainer: Trainer, checkpoints: CheckpointManager) -> str:
    command = "the same command"
    if sys.argv and Path(sys.argv[0]).name == "__main__.py" and Path(sys.argv[0]).parent.name == "pretrain":
        command = shlex.join(["python", "-m", "pretrain", *sys.argv[1:]])
    return (f"stopped by {trainer.stopped} after step {trainer.state.global_step}; its checkpoint is in "
            f"{checkpoints.directory}. To resume, run {command} again (same run_dir): it continues "
            f"from step {trainer.state.global_step}")


def phase_plans(
    cfg: DictConfig, prepared: Dict[str, Any], plist: List[Any], schedules: List[Any]
) -> List[PhasePlan]:
    """Each phase's schedule and its train / validation loaders over its data mix, for this dp rank."""
    dp_rank, dp_size = ranks.data_parallel_rank(cfg)
    plans = []
    for phase, lr in zip(plist, schedules, strict=True):
        val = (
            make_loader(cfg, prepared, phase, "val", dp_rank, dp_size) if cfg.data.val_fraction > 0 else None
        )
        plans.append(
            PhasePlan(str(phase.name), lr, make_loader(cfg, prepared, phase, "train", dp_rank, dp_size), val)
        )
    return plans


def build_trainer(
    cfg: DictConfig,
    pad: int,
    metrics: MetricsWriter,
    checkpoints: Optional[CheckpointManager],
    events: Optional[EventLog] = None,
) -> Trainer:
    """The MindFormers model, its GRAPH-mode step and the loop around it."""
    import mindspore as ms

    from pretrain.train.step import TrainStep, train_step_args

    ms.set_seed(int(cfg.train.seed))
    net = builder.build_model(cfg, pad_token_id=pad)
    t, p = cfg.train, cfg.parallel
    step = TrainStep(net, lr=0.0, **train_step_args(cfg))
    seq = int(cfg.model.seq_length)
    throughput = Throughput(
        tokens_per_step=int(t.global_batch_size) * seq,
        devices=int(p.dp * p.tp * p.pp * p.cp),
        flops_per_token=flops_per_token(model_shape(cfg.model), seq),
        peak_flops=float(cfg.hardware.peak_tflops) * 1e12,
    )
    return Trainer(
        step,
        metrics=metrics,
        throughput=throughput,
        grad_accum=int(t.grad_accum),
        arch=architecture(cfg),
        log_every=t.log_every,
        eval_every=t.eval_every,
        eval_batches=t.eval_batches,
        checkpoints=checkpoints,
        save_every_steps=t.save_every_steps,
        save_every_minutes=t.save_every_minutes,
        saving=ranks.is_logging_rank(),
        events=events,
        spike=resilience.spike_guard(cfg.resilience),
        nonfinite=resilience.nonfinite_guard(cfg.resilience),
        run_config=OmegaConf.to_container(cfg, resolve=True),
    )


def export_mindformers_yaml(
    cfg: DictConfig, run_dir: Path, first: Any, steps: int, peak: float, prepared: Dict[str, Any], pad: int
) -> None:
    files = [str(f) for name in first.mix for f in prepared[name].train_shards]
    exported = mindformers_config.export(
        cfg,
        first_phase=first,
        first_phase_steps=steps,
        first_phase_peak=peak,
        train_files=files,
        pad_token_id=pad,
    )
    write_atomic(run_dir / "mindformers.yaml", mindformers_config.to_yaml(exported))


def make_loader(
    cfg: DictConfig, prepared: Dict[str, Any], phase: Any, split: str, dp_rank: int, dp_size: int
) -> Any:
    from pretrain.data.loader import BatchLoader

    per_step = int(cfg.parallel.micro_batch_size) * (int(cfg.train.grad_accum) if split == "train" else 1)
    return BatchLoader(
        prepared,
        {k: float(v) for k, v in phase.mix.items()},
        batch_size=per_step,
        seq_length=int(cfg.model.seq_length),
        seed=phase_seed(cfg, str(phase.name)),
        dp_rank=dp_rank,
        dp_size=dp_size,
        split=split,
    )


def format_summary(summary: Dict[str, Any]) -> str:
    lines = [
        f"trained {summary['params']:,} parameters for {summary['global_step']} steps in "
        f"{summary['wall_s']:.0f} s -> {summary['run_dir']}",
        f"{'phase':<10}{'steps':>6}{'loss first':>12}{'loss last':>11}{'(mean first/last)':>20}"
        f"{'val last':>10}{'lr first':>11}{'lr last':>10}{'tok/s':>8}{'wall s':>8}",
    ]
    for r in summary["phases"]:
        val = f"{r['val_loss_last']:.3f}" if r["val_loss_last"] is not None else "-"
        lines.append(
            f"{r['phase']:<10}{r['steps']:>6}{r['loss_first']:>12.3f}{r['loss_last']:>11.3f}"
            f"{r['loss_start_mean']:>10.3f}/{r['loss_end_mean']:<9.3f}{val:>10}{r['lr_first']:>11.2e}"
            f"{r['lr_last']:>10.2e}{r['tokens_per_s']:>8.0f}{r['wall_s']:>8.0f}"
        )
    return "\n".join(lines)
