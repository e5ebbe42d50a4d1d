"""The run's resilience, as one component the training loop consults (pretrain/train/loop.py):

    keeper.resume(trainer, start, changes, phases)  # load the start checkpoint, say where the run continues
    keeper.new_phase()                          # a new data mix: the spike guard starts over
    keeper.beat(step) / keeper.slow_ahead(step) # the watchdog: a step finished / something slow comes
    keeper.after_step(trainer, phase, record)    # non-finite count, spike -> rollback
    keeper.may_save()                           # not while the spike guard holds suspect losses
    keeper.stop_requested(trainer)              # SIGTERM/SIGINT: checkpoint this step, stop

It holds the guards (SpikeGuard, NonFiniteGuard, the Watchdog and the GracefulStop the loop
installs), the events log and the checkpoint manager. A confirmed loss spike rolls the run back to
the newest checkpoint from before the step whose update broke it (the step before the spike's
first high loss), skips that data window and continues; a run that keeps failing stops with one
line in the events log.
"""
import time
from pathlib import Path
from typing import Any, Callable, Optional, Protocol, Sequence, Tuple

from pretrain.config.errors import PretrainRunError
from pretrain.resilience.checkpoint import read_state
from pretrain.resilience.identity import final_tag
from pretrain.resilience.skips import add_window, data_index


class Trainee(Protocol):
    """What the keeper uses of the trainer (pretrain.train.trainer.Trainer): its resumable state and
    metrics log, and checkpoint save and load."""
    state: Any            # TrainState: the keeper moves it back on a rollback
    metrics: Any          # MetricsWriter: cut back to the checkpoint on a rollback
    overall: str          # "[k/n] " of the console's phase line
    saved_at: int         # global step of the newest checkpoint this process wrote or loaded

    def save(self, tag: Optional[str] = None) -> None: ...

    def load(self, checkpoints: Any, info: Any) -> Any: ...

    def restore(self, checkpoints: Any, info: Any) -> Any: ...


class Keeper:
    def __init__(self, *, checkpoints: Any = None, writes_run_files: bool = True, events: Any = None,
                 spike: Any = None, nonfinite: Any = None,
                 all_sum: Optional[Callable[[float, int], float]] = None, data_parallel: int = 1):
        self.checkpoints = checkpoints  # a CheckpointManager: every rank reads (rollbacks), ...
        self.writes_run_files = bool(writes_run_files)  # ... only the rank that writes the run files saves
        self.events = events  # EventLog where this rank writes the run files, else None
        self.spike = spike  # SpikeGuard: its state is checkpointed, a spike rolls back
        self.nonfinite = nonfinite  # NonFiniteGuard: counts skipped updates, stops a run that keeps failing
        self.stop: Any = None  # GracefulStop, set by the runner around the loop
        self.watchdog: Any = None  # Watchdog, set by the runner around the loop
        self.stopped: Optional[str] = None  # the signal that ended the run early
        self.all_sum = all_sum  # a value summed over the data-parallel ranks (train.ranks.all_sum)
        self.data_parallel = int(data_parallel)  # ranks that must roll back to the same checkpoint

    # ------------------------------------------------------------------ resume, step, stop
    def resume(self, trainer: Trainee, start: Any, changes: Sequence[Tuple[str, Any, Any]] = (),
               phases: Sequence[str] = (), data: Sequence[Tuple[str, Any, Any]] = ()) -> None:
        """Load the start checkpoint (resilience.resume.start_point) on this rank; log (and, when
        any of `phases` is left to train, print) where the run continues from. No start: a fresh
        run, whose metrics log starts over."""
        if start is None:  # every step runs again: one record per step (a crash before the first save)
            trainer.metrics.rewind(0)
            return
        announce = not set(phases) <= set(read_state(start.info).get("phases_done", []))
        checkpoints, events = self.checkpoints, self.events
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
            for what, old, new in data:   # accepted only with resilience.allow_data_change
                events.log("data_change", step=state.global_step, what=what, old=old, new=new,
                           path=str(start.info.path))
            events.log("resume", step=state.global_step, phase=state.phase, phase_step=state.phase_step,
                       path=str(start.info.path), handoff=start.handoff, load_s=round(load_s, 3),
                       config_changed=[key for key, _, _ in changes])
            if announce:
                print(f"{how} from {start.info.path} (global step {state.global_step}, loaded in "
                      f"{load_s:.1f} s)", flush=True)
            if data:
                print("data changed since the checkpoint (resilience.allow_data_change=true, logged in "
                      "events.jsonl): " + ", ".join(what for what, _, _ in data), flush=True)
            if changes:
                print("config changed since the checkpoint (allowed on resume, logged in events.jsonl): "
                      + ", ".join(f"{k} {old!r} -> {new!r}" for k, old, new in changes), flush=True)
        if branched:  # its own copy of where it started: it resumes and rolls back without the base run
            trainer.save(tag=final_tag(state.phase) if state.phase in state.phases_done else None)

    def after_step(self, trainer: Trainee, phase: Any, record: Any) -> bool:
        """After each step: count a non-finite step, feed the spike guard; True when a confirmed
        spike rolled the run back (the loop continues from the restored step)."""
        self.count_nonfinite(record)
        s = trainer.state
        if self.spike is not None and self.spike.observe(s.global_step, record["loss"]):
            self.roll_back(trainer, phase, record["loss"])
            return True
        return False

    def may_save(self) -> bool:
        """False while the spike guard holds suspect losses: that model may be the broken one, and
        retention (train.keep_checkpoint_max) would delete the good checkpoint a rollback needs."""
        return self.spike is None or not self.spike.suspect

    def stop_requested(self, trainer: Trainee) -> bool:
        """On SIGTERM/SIGINT: make sure a checkpoint of this step exists, log, set self.stopped."""
        if self.stop is None or not self.stop.requested:
            return False
        if trainer.saved_at != trainer.state.global_step:
            self.slow_ahead(trainer.state.global_step)
            trainer.save()
        self.event("signal", signal=self.stop.signal_name, step=trainer.state.global_step)
        self.stopped = self.stop.signal_name
        return True

    # ------------------------------------------------------------------ watchdog
    def beat(self, step: int) -> None:
        if self.watchdog is not None:
            self.watchdog.beat(step)

    def slow_ahead(self, step: int) -> None:
        """The next thing is slow (a save, a load, an evaluation that may compile): allow it the
        first-step timeout instead of the per-step one."""
        dog = self.watchdog
        if dog is not None:
            dog.beat(step, next_timeout_s=max(dog.timeout_s, dog.first_timeout_s))

    # ------------------------------------------------------------------ guards
    def event(self, kind: str, **fields: Any) -> None:
        if self.events is not None:
            self.events.log(kind, **fields)

    def fatal(self, step: int, error: PretrainRunError) -> PretrainRunError:
        """Log a guard's give-up in the events log before it ends the run."""
        self.event("error", step=step, reason=str(error))
        return error

    def new_phase(self) -> None:
        if self.spike is not None:
            self.spike.reset()  # a new data mix has a new loss level

    def count_nonfinite(self, record: Any) -> None:
        """The graph already skipped the update of a non-finite step (and the loss scale backed
        off); here it is logged and counted, and a run that keeps failing stops with an error."""
        if self.nonfinite is None:
            return
        if not record["finite"]:
            self.event(
                "skip",
                step=record["step"],
                what="update",
                reason="non-finite loss or gradients",
                loss=record["loss"],
                grad_norm=record["grad_norm"],
                loss_scale=record["loss_scale"],
                in_a_row=self.nonfinite.consecutive + 1,
            )
        try:
            self.nonfinite.observe(record["step"], record["finite"])
        except PretrainRunError as e:
            raise self.fatal(record["step"], e) from None

    def roll_back(self, trainer: Trainee, phase: Any, loss: float) -> None:
        """A confirmed loss spike: back to the newest checkpoint from before the step whose update
        broke the model (the one before the spike's first high loss), skip the spike's data window,
        continue."""
        s = trainer.state
        spike = self.spike.last_spike
        first, confirmed = spike.first, spike.step
        self.event("spike", step=s.global_step, first_step=first, loss=loss, threshold=spike.bar,
                   rule=spike.rule)
        try:
            self.spike.record_rollback(s.global_step)  # raises past resilience.max_rollbacks
        except PretrainRunError as e:
            raise self.fatal(s.global_step, e) from None
        # The loss of step `first` is the first high one, so the update of step first-1 may be what
        # broke the model: its data is skipped and the checkpoint must predate it.
        phase_base = s.global_step - s.phase_step  # the global step before this phase's first
        windows = s.data_skips.get(phase.name, [])
        lo = data_index(max(first - 1 - phase_base - 1, 0), windows)
        hi = data_index(s.phase_step - 1, windows)
        skips = {**s.data_skips, phase.name: add_window(windows, lo, hi)}
        self.slow_ahead(s.global_step)
        info = self.rollback_target(trainer, before_step=first - 1)
        if info is None:
            raise self.fatal(s.global_step, PretrainRunError(
                f"loss spike at step {confirmed}: {self.spike.explain(spike)}, and no checkpoint from "
                f"before step {first - 1} to roll back to: lower train.lr_peak or save earlier "
                f"(train.save_every_steps)"
            ))
        saved = read_state(info)
        if saved.get("phase") != phase.name and saved.get("phase") not in saved.get("phases_done", []):
            raise self.fatal(s.global_step, PretrainRunError(
                f"loss spike in phase {phase.name}: the newest checkpoint from before it, {info.path}, is "
                f"in the middle of phase {saved.get('phase')}; a rollback stays within one phase: "
                f"resume from it (restart the run) or lower the LR"
            ))
        if self.writes_run_files:
            self.checkpoints.discard_from(info.step + 1, "rollback")  # a crash must not resume into the spike
        spiked_at, why = s.global_step, self.spike.explain(spike)   # before the rewind moves the bar
        trainer.load(self.checkpoints, info)
        trainer.state.data_skips = skips
        if trainer.state.phase != phase.name:  # rolled back to the previous phase's final checkpoint
            trainer.state.phase, trainer.state.phase_step = phase.name, 0
        self.spike.rewind(info.step)
        trainer.metrics.rewind(info.step)
        trainer.metrics.end_phase()
        trainer.metrics.start_phase(phase.name, phase.steps, done=trainer.state.phase_step,
                                    overall=trainer.overall)
        self.event("rollback", step=spiked_at, to_step=info.step, path=str(info.path),
                   spike=[first, confirmed])
        self.event("skip", step=info.step, what="data", phase=phase.name, data=[lo, hi],
                   steps=[first - 1, confirmed])
        trainer.metrics.note(f"loss spike at step {spiked_at}: {why}; rolled back to step {info.step}, "
                             f"skipping {phase.name}'s data {lo}-{hi}")
        trainer.save()  # the same step again, now recording the skipped window: a crash resumes past it
        self.beat(trainer.state.global_step)

    def rollback_target(self, trainer: Trainee, before_step: int) -> Any:
        """The checkpoint every rank rolls back to: the newest that verifies from before
        `before_step`. Under data parallelism the saving rank picks it once its async writer is done
        and the others take the step it picked, so no rank can see a different newest checkpoint."""
        if self.checkpoints is None:
            return None
        degree = self.data_parallel
        if degree <= 1:
            return self.checkpoints.latest(before_step=before_step)
        mine = None
        if self.writes_run_files:
            self.checkpoints.wait()
            mine = self.checkpoints.latest(before_step=before_step)
        picked = int(self.all_sum(mine.step + 1 if mine is not None else 0, degree)) - 1
        if picked < 0:
            return None
        info = mine if self.writes_run_files else self.checkpoints.latest(before_step=picked + 1)
        if info is None or info.step != picked:
            raise self.fatal(trainer.state.global_step, PretrainRunError(
                f"loss spike rollback: the rank that writes the run files rolls back to step {picked}, but "
                f"this rank finds {info.path if info else 'no checkpoint'} in {self.checkpoints.directory}: "
                f"every rank must see the same checkpoint directory (shared storage)"
            ))
        return info
