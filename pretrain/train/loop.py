"""`train_rank(resolved, ready)`: train a resolved run's phases in this process and return the run's summary.

Read top to bottom: build (model, data, checkpoints) -> resume -> for each phase, for each step:
step, log, eval, save -> summarise. The resilience guards are one component (`trainer.keeper`,
pretrain/resilience/keeper.py) the loop consults at seven points: resume (before the first step),
new_phase, beat after each step and evaluation and slow_ahead before the first evaluation (the
watchdog), after_step (non-finite count, spike rollback), may_save (no checkpoint of a suspect loss)
and stop_requested (SIGTERM/SIGINT, between steps and phases). A later phase run alone starts from
the previous phase's final checkpoint of the base run (pretrain/config/branch.py).
Under msrun every rank calls it with RANK_ID / RANK_SIZE set; rank 0 writes the run's files, every
rank loads the same checkpoint.
"""
import time
from typing import Any, Dict, List, Optional

from pretrain.config import validate
from pretrain.config.layout import ParallelLayout
from pretrain.config.resolved import ResolvedRun
from pretrain.model import builder
from pretrain.plan.measured import plan_of, record_calibration
from pretrain.resilience import guards
from pretrain.resilience.events import EventLog
from pretrain.resilience.identity import final_tag
from pretrain.resilience.resume import start_point
from pretrain.resilience.signals import GracefulStop
from pretrain.train import build, measure, ranks
from pretrain.train.measure import PhaseMeter
from pretrain.train.ready import Ready, continues_from, data_ready
from pretrain.train.metrics import WINDOW, MetricsWriter
from pretrain.train.schedule import curriculum
from pretrain.train.summary import boundary_line, finish, phase_result
from pretrain.train.trainer import PhaseInputs, Trainer


def train_rank(resolved: ResolvedRun, ready: Optional[Ready] = None) -> Dict[str, Any]:
    """`ready`: what the launcher made of the run in this process (one device); None in a process of
    its own (msrun's ranks, node scripts), which checks the frozen config it read and readies the data."""
    started = time.perf_counter()
    cfg, run_dir = resolved.cfg, resolved.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    if ready is None:
        builder.prepare_environment(str(run_dir))  # before anything imports mindspore / mindformers
        validate.check(cfg)        # the frozen config is what ranks train: the launch's rules hold here too
    validate.check_trainable(cfg)
    steps = [p.steps for p in resolved.phases]

    # build: where the run starts (before the slow parts), the data, the model
    rank = ranks.rank_info()[0]
    writes_run_files = ParallelLayout.writes_run_files(rank)
    events = EventLog(run_dir / "events.jsonl") if writes_run_files else None
    checkpoints = build.checkpoint_manager(resolved, rank, events)
    # a rank may read a config.yaml edited since the launch: it looks again in a process of its own
    looked = ready.begin if ready is not None else None
    begin = looked if looked is not None else start_point(resolved, checkpoints)
    if ready is None:
        # the data the start checkpoint was trained on: refused (or, overridden, logged) before the model builds
        ready = data_ready(resolved, begin, progress=writes_run_files)
    elif looked is None:
        continues_from(ready, resolved, begin)
    start, changes = begin
    prepared, pad = ready.prepared, ready.pad_token_id
    metrics = MetricsWriter(run_dir, enabled=writes_run_files)
    trainer = build.build_trainer(resolved, pad, metrics, checkpoints, events)
    trainer.data_identity = ready.identity   # saved with every checkpoint

    # resume (or start fresh), then each phase's schedule from where the run stands
    trainer.keeper.resume(trainer, start, changes, phases=resolved.phase_names, data=ready.data_changed)
    schedules = curriculum([p.node for p in resolved.phases], steps, start=trainer.state.lr_start)
    inputs = build.phase_inputs(resolved, prepared, schedules)
    fed = ranks.RowLog()  # what this rank trained on, for its exit status (pretrain.worker)
    for phase in inputs:
        phase.loader = fed.watch(phase.loader)
    if writes_run_files:
        events.log("start", step=trainer.state.global_step, phases=[p.name for p in inputs], steps=steps)

    # train, under the signal handler and the watchdog
    try:
        with GracefulStop() as stop, guards.watchdog(cfg.resilience, run_dir, events, rank=rank) as dog:
            # every rank of the job agrees on a stop, so all of them stop after the same step
            trainer.keeper.stop, trainer.keeper.watchdog = ranks.agreed_stop(stop), dog
            results = train_phases(trainer, inputs)
            # every rank agrees on both: the collective runs on all
            if results and not trainer.keeper.stopped:
                measure.note_allreduce(results, trainer.step.allreduce_s())
    finally:
        metrics.close()
        checkpoints.close()

    # summarise: summary.json with the plan beside what was measured, the loss curve and the table, the
    # calibration point (rank 0); what this rank trained (every rank)
    planned = plan_of(resolved)
    for result in results:
        result["planned"] = measure.planned(planned)
    summary = finish(run_dir, trainer, results, time.perf_counter() - started, checkpoints.directory, events)
    if writes_run_files and summary["measured"]["step_s"]:   # else no step ran after compile
        record_calibration(resolved, planned, summary["measured"]["step_s"], measure.calibration_peak_gb(cfg))
    summary["rank_evidence"] = build.rank_evidence(trainer, fed, results)  # not in summary.json: this rank's
    return summary


def train_phases(trainer: Trainer, inputs: List[PhaseInputs]) -> List[Dict[str, Any]]:
    """Train the phases in order, skipping those a resumed state already finished;
    stops early (trainer.keeper.stopped) on SIGTERM/SIGINT."""
    results = []
    total = sum(p.steps for p in inputs)
    for k, phase in enumerate(inputs, 1):
        if phase.name in trainer.state.phases_done:
            continue
        if trainer.keeper.stop_requested(trainer):  # arrived during the previous phase's final save
            break
        trainer.overall = f"[{k}/{len(inputs)}] " if len(inputs) > 1 else ""
        results.append(train_phase(trainer, phase))
        if trainer.keeper.stopped:
            break
        trainer.metrics.note(boundary_line(results[-1], inputs[k:], total, trainer.throughput.tokens_per_step))
    return results


def train_phase(trainer: Trainer, phase: PhaseInputs) -> Dict[str, Any]:
    """One phase, step by step: step, log, (roll back,) eval, save, stop on a signal."""
    s, keeper, metrics = trainer.state, trainer.keeper, trainer.metrics
    if s.phase != phase.name:
        s.phase, s.phase_step, s.phase_losses = phase.name, 0, []
        keeper.new_phase()
    started = time.perf_counter()
    meter = PhaseMeter(saves_before=len(trainer.save_times))
    losses: Dict[int, float] = {}  # global step -> loss, of the steps this process ran
    val: Dict[int, float] = {}
    first_step = s.global_step + 1
    resumed = s.phase_step > 0            # the phase's earlier steps ran in an earlier process
    owed = False                          # a save due while the loss was suspect: made once it is not
    metrics.start_phase(phase.name, phase.steps, done=s.phase_step, overall=trainer.overall)
    while s.phase_step < phase.steps:
        record = trainer.train_step(phase)
        keeper.beat(s.global_step)
        meter.step(record, trainer.steps_run)
        losses[s.global_step] = record["loss"]
        if len(s.phase_losses) < WINDOW:   # checkpointed: the phase's start loss survives a resume
            s.phase_losses.append(record["loss"])
        metrics.progress(record)
        last = s.phase_step == phase.steps
        if s.global_step % trainer.log_every == 0 or last:
            metrics.log(record)
        if keeper.after_step(trainer, phase, record):  # a spike rolled the run back: forget what came after
            losses = {k: v for k, v in losses.items() if k <= s.global_step}
            val = {k: v for k, v in val.items() if k <= s.global_step}
            owed = False                  # the rollback saved the step it went back to
            continue
        evaluate = last or (trainer.eval_every and s.phase_step % trainer.eval_every == 0)
        if phase.val_loader is not None and evaluate:
            keeper.slow_ahead(s.global_step)  # the first evaluation compiles its graph
            val[s.global_step] = trainer.evaluate(phase)
            keeper.beat(s.global_step)
            metrics.log({"kind": "val", "step": s.global_step, "phase": phase.name,
                         "val_loss": val[s.global_step]})
        owed = not last and (owed or trainer.save_due())
        if owed and keeper.may_save():
            trainer.save()
            owed = False
        if not last and keeper.stop_requested(trainer):
            break
    metrics.end_phase()
    if not trainer.keeper.stopped:
        s.phases_done.append(phase.name)
        trainer.save(tag=final_tag(phase.name))
    result = phase_result(phase, first_step, s.global_step, bool(trainer.keeper.stopped),
                          time.perf_counter() - started, losses, val, trainer.throughput.tokens_per_step,
                          head=s.phase_losses if resumed else None)
    result["measured"] = meter.result(trainer.throughput.tokens_per_step, trainer.save_times)
    return result
