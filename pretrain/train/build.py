"""The pieces the training loop (pretrain/train/loop.py) is built from: the model and its Trainer,
each phase's loaders (its data mix for this data-parallel rank), the checkpoint manager, and what a
rank reports of what it trained."""

import zlib
from pathlib import Path
from typing import Any, Dict, List, Optional

from omegaconf import DictConfig, OmegaConf

from pretrain.config.errors import PretrainDataError
from pretrain.config.resolved import ResolvedPhase, ResolvedRun
from pretrain.data.loader import BatchLoader
from pretrain.data.tokenizer import load
from pretrain.model import builder
from pretrain.plan.planner import flops_per_token, model_shape
from pretrain.resilience import guards as resilience
from pretrain.resilience.checkpoint import CheckpointManager
from pretrain.resilience.events import EventLog
from pretrain.resilience.identity import architecture, architecture_hash
from pretrain.train import ranks
from pretrain.train.metrics import MetricsWriter
from pretrain.train.trainer import PhaseInputs, Throughput, Trainer

# lazy imports (mindspore, pretrain.train.step): by design; step.py imports mindspore (3-10 s) at its top


def pad_token_id(tokenizer_path: str) -> int:
    """The tokenizer's padding id, -1 when it has none (then no token is masked out as padding;
    the loader's loss mask still excludes padded positions)."""

    return int(load(Path(tokenizer_path)).pad_id())


def phase_seed(cfg: DictConfig, name: str) -> int:
    # The same phase samples the same batches whether it runs alone or inside the curriculum.
    return int(cfg.train.seed) + zlib.crc32(name.encode()) % 100003


def checkpoint_manager(run: ResolvedRun, rank: int, events: Optional[EventLog]) -> CheckpointManager:
    """run_dir/checkpoints/: every rank reads it (resume, rollback); the rank the layout names writes."""
    cfg, layout, run_dir = run.cfg, run.layout, run.run_dir
    return CheckpointManager(
        layout.checkpoint_dir(run_dir, 0),
        keep_latest=int(cfg.train.keep_checkpoint_max),
        events=events,
        config_hash=architecture_hash(architecture(cfg)),
        async_save=bool(cfg.resilience.async_save),
        writes_run_files=layout.checkpoint_dir(run_dir, rank) is not None,
        start_fresh=bool(cfg.resilience.start_fresh),
    )


def rank_evidence(trainer: Trainer, fed: ranks.RowLog, results: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The rows this rank trained on, the last loss it saw (the mean over the data-parallel ranks)
    and, for data-parallel replicas (which must end identical), a digest of its final weights."""
    out = {"data_parallel": trainer.step.data_parallel, **fed.evidence(),
           "loss_last": results[-1]["loss_last"] if results else None}
    if trainer.step.data_parallel > 1:
        out["params_sha256"] = ranks.params_digest(trainer.step.net)
    return out


def phase_inputs(run: ResolvedRun, prepared: Dict[str, Any], schedules: List[Any]) -> List[PhaseInputs]:
    """Each phase's schedule and its train / validation loaders over its data mix, for this dp rank."""
    dp_rank, dp_size = ranks.data_parallel_rank(run.layout)
    inputs = []
    for phase, lr in zip(run.phases, schedules, strict=True):
        val = val_loader(run, prepared, phase, dp_rank, dp_size)
        train = make_loader(run, prepared, phase, "train", dp_rank, dp_size)
        inputs.append(PhaseInputs(phase.name, lr, train, val))
    return inputs


def val_loader(run: ResolvedRun, prepared: Dict[str, Any], phase: ResolvedPhase, dp_rank: int,
               dp_size: int) -> Any:
    """The phase's validation loader; None without a held-out split. A mix whose data has no
    validation rows (a corpus too small for data.val_fraction, which the data step notes) trains
    without validation under train.eval_every=0 (then validation only runs at a phase's end), with
    a line saying so; with periodic validation asked for it is refused, naming that fix."""
    cfg = run.cfg
    if cfg.data.val_fraction <= 0:
        return None
    empty = sorted(n for n, w in phase.node.mix.items()
                   if float(w) > 0 and n in prepared and not int(prepared[n].manifest["val"]["rows"]))
    if not empty:
        return make_loader(run, prepared, phase, "val", dp_rank, dp_size)
    what = (f"phase {phase.name}: {', '.join(empty)} ha{'s' if len(empty) == 1 else 've'} no validation rows "
            f"(too little data for data.val_fraction={cfg.data.val_fraction})")
    if int(cfg.train.eval_every) > 0:
        raise PretrainDataError(f"{what}; train.eval_every={cfg.train.eval_every} asks for validation: "
                                f"set train.eval_every=0 to train without it, or add data / raise "
                                f"data.val_fraction")
    if ranks.rank_info()[0] == 0:
        print(f"note: {what}: trained without validation", flush=True)
    return None


def build_trainer(
    run: ResolvedRun,
    pad: int,
    metrics: MetricsWriter,
    checkpoints: Optional[CheckpointManager],
    events: Optional[EventLog] = None,
) -> Trainer:
    """The MindFormers model, its GRAPH-mode step and the loop around it."""
    import mindspore as ms

    from pretrain.train.step import TrainStep, train_step_args

    cfg = run.cfg
    ms.set_seed(int(cfg.train.seed))
    net = builder.build_model(cfg, pad_token_id=pad)
    t = cfg.train
    step = TrainStep(net, lr=0.0, **train_step_args(cfg))
    seq = int(cfg.model.seq_length)
    throughput = Throughput(
        tokens_per_step=int(t.global_batch_size) * seq,
        devices=run.layout.world_size,
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
        writes_run_files=ranks.writes_run_files(),
        events=events,
        spike=resilience.spike_guard(cfg.resilience, int(cfg.model.vocab_size)),
        nonfinite=resilience.nonfinite_guard(cfg.resilience),
        run_config=OmegaConf.to_container(cfg, resolve=True),
    )


def make_loader(
    run: ResolvedRun, prepared: Dict[str, Any], phase: ResolvedPhase, split: str, dp_rank: int, dp_size: int
) -> Any:
    """The phase's loader of `split` for data-parallel rank `dp_rank` of `dp_size`: a step's rows
    (train) or one micro-batch (val) as the layout says."""

    per_step = run.layout.rows_per_step if split == "train" else run.layout.micro_batch_size
    return BatchLoader(
        prepared,
        {k: float(v) for k, v in phase.node.mix.items()},
        batch_size=per_step,
        seq_length=int(run.cfg.model.seq_length),
        seed=phase_seed(run.cfg, phase.name),
        dp_rank=dp_rank,
        dp_size=dp_size,
        split=split,
        vocab_size=int(run.cfg.model.vocab_size),
    )
