"""The training loop: one Trainer, one `train_step()` per optimizer step, all resumable state in
`TrainState`.

Nothing hides in iterators: the batch of a step is `loader.batch(state.phase_step)` and its LR is
`schedule.at(state.phase_step)`, so restoring a TrainState (and the weights + optimizer moments
the checkpoint holds) continues exactly where the run stopped. (After a loss-spike rollback the
batch index skips the spike's data windows, which TrainState.data_skips records.)

The resilience guards hook in around `train_step()` (pretrain/resilience/): after each step the
watchdog is fed, a non-finite step (its update already skipped inside the graph) is counted, the
spike guard sees the loss and may roll the run back to an older checkpoint, and a SIGTERM/SIGINT
ends the run at the step boundary with a checkpoint.
"""

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional

from pretrain.config.errors import PretrainRunError
from pretrain.resilience import faults
from pretrain.resilience.checkpoint import read_state
from pretrain.resilience.identity import check_same_arch, final_tag
from pretrain.resilience.skips import add_window, data_index
from pretrain.train import ranks
from pretrain.train.metrics import MetricsWriter, host_memory_gb, mean_of
from pretrain.train.schedule import PhaseLR


@dataclass
class TrainState:
    global_step: int = 0  # optimizer steps done by the whole run
    phase: str = ""
    phase_step: int = 0  # steps done in `phase`: also its data position
    lr: float = 0.0  # LR of the last step (a continuing phase starts from it)
    loss_scale: Dict[str, float] = field(default_factory=dict)
    phases_done: List[str] = field(default_factory=list)
    lr_start: float = 0.0  # LR the run's first phase starts from (phase run alone: the previous phase's last)
    # per phase: data-index windows [lo, hi] skipped after loss spikes (pretrain/resilience/skips.py)
    data_skips: Dict[str, List[List[int]]] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "TrainState":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


@dataclass
class PhasePlan:
    name: str
    lr: PhaseLR  # lr.steps is the phase length
    loader: Any  # .batch(step) -> dict of [B, S] arrays, B = micro_batch × grad_accum
    val_loader: Any  # .batch(i) for i < eval_batches; None: no validation split

    @property
    def steps(self) -> int:
        return self.lr.steps


@dataclass
class Throughput:
    tokens_per_step: int  # global: global_batch_size × seq_length
    devices: int
    flops_per_token: float  # the planner's F2
    peak_flops: float  # per device (hardware.peak_tflops × 1e12)


def split_micro(batch: Dict[str, Any], n: int) -> List[Dict[str, Any]]:
    rows = len(next(iter(batch.values())))
    if rows % n:
        raise PretrainRunError(f"batch of {rows} rows does not split into grad_accum={n} micro-batches")
    size = rows // n
    return [{k: v[i * size : (i + 1) * size] for k, v in batch.items()} for i in range(n)]


class Trainer:
    def __init__(
        self,
        step: Any,
        *,
        metrics: MetricsWriter,
        throughput: Throughput,
        grad_accum: int,
        arch: Dict[str, Any],
        log_every: int = 1,
        eval_every: int = 0,
        eval_batches: int = 1,
        checkpoints: Any = None,
        save_every_steps: int = 0,
        save_every_minutes: float = 0.0,
        saving: bool = True,
        events: Any = None,
        spike: Any = None,
        nonfinite: Any = None,
        run_config: Optional[Dict[str, Any]] = None,
    ):
        self.step = step  # pretrain.train.step.TrainStep
        self.metrics = metrics
        self.throughput = throughput
        self.grad_accum = int(grad_accum)
        self.arch = dict(arch)
        self.log_every = max(1, int(log_every))
        self.eval_every = int(eval_every)
        self.eval_batches = int(eval_batches)
        self.checkpoints = checkpoints  # a CheckpointManager: every rank reads (rollbacks), ...
        self.saving = bool(saving)  # ... only the logging rank writes
        self.save_every_steps = int(save_every_steps)
        self.save_every_s = float(save_every_minutes) * 60.0
        self.events = events  # EventLog on the logging rank, else None
        self.spike = spike  # SpikeGuard: its state is checkpointed, a spike rolls back
        self.nonfinite = nonfinite  # NonFiniteGuard: counts skipped updates, stops a run that keeps failing
        self.run_config = run_config  # saved with each checkpoint: what a resume compares against
        self.stop: Any = None  # GracefulStop, set by the runner around the loop
        self.watchdog: Any = None  # Watchdog, set by the runner around the loop
        self.stopped: Optional[str] = None  # the signal that ended the run early
        self.faults = faults.active()  # test-only fault injection; None in real runs
        self.state = TrainState()
        self._last_save = time.monotonic()
        self._saved_at = 0  # global step of the newest checkpoint this process wrote or loaded
        self._overall = ""  # "[k/n] ": which of the run's phases the console is showing

    # ------------------------------------------------------------------ one step
    def train_step(self, plan: PhasePlan) -> Dict[str, Any]:
        """One optimizer step at state.phase_step of `plan`; advances the state; returns its record."""
        s = self.state
        started = time.perf_counter()
        lr = plan.lr.at(s.phase_step)
        index = data_index(s.phase_step, s.data_skips.get(plan.name, ()))
        batch = plan.loader.batch(index)
        applied = lr
        if self.faults is not None:
            self.faults.before_step(s.global_step + 1)
            batch = self.faults.batch(s.global_step + 1, batch)
            applied = self.faults.lr(plan.name, index, lr)
        out = self.step.step(split_micro(batch, self.grad_accum), applied)
        step_time = time.perf_counter() - started
        s.global_step += 1
        s.phase_step += 1
        s.lr = lr
        tp = self.throughput
        tokens_per_s = tp.tokens_per_step / step_time
        return {
            "kind": "train",
            "step": s.global_step,
            "phase": plan.name,
            "phase_step": s.phase_step,
            "data_index": index,
            "loss": out["loss"],  # token-weighted over the whole global batch (step.py)
            "lr": applied,
            "grad_norm": out["grad_norm"],
            "loss_scale": out["loss_scale"],
            "finite": out["finite"],
            "tokens_per_s": tokens_per_s,
            "mfu": tokens_per_s / tp.devices * tp.flops_per_token / tp.peak_flops,
            "step_time_s": step_time,
            "host_mem_gb": host_memory_gb(),
        }

    def evaluate(self, plan: PhasePlan) -> float:
        """LM loss over the phase's first eval_batches validation batches (the same ones every
        time, so the curve compares like with like), token-weighted like the training loss."""
        sums = [self.step.evaluate_sums(plan.val_loader.batch(i)) for i in range(self.eval_batches)]
        return sum(lm for lm, _ in sums) / max(sum(n for _, n in sums), 1.0)

    # ------------------------------------------------------------------ a phase
    def run(self, plans: List[PhasePlan]) -> List[Dict[str, Any]]:
        """Train the plans' phases in order, skipping those a resumed state already finished;
        stops early (self.stopped) on SIGTERM/SIGINT."""
        results = []
        total = sum(p.steps for p in plans)
        for k, plan in enumerate(plans, 1):
            if plan.name in self.state.phases_done:
                continue
            if self._stop_requested():  # arrived during the previous phase's final save
                break
            self._overall = f"[{k}/{len(plans)}] " if len(plans) > 1 else ""
            results.append(self.run_phase(plan))
            if self.stopped:
                break
            self.metrics.note(self._boundary_line(results[-1], plans[k:], total))
        return results

    def _boundary_line(self, done: Dict[str, Any], rest: List[PhasePlan], total: int) -> str:
        """One line at the end of a phase: how it went, where the whole run stands, what is next."""
        val = f", val {done['val_loss_last']:.3f}" if done["val_loss_last"] is not None else ""
        line = (f"phase {done['phase']} done: steps {done['first_step']}-{done['last_step']}, loss "
                f"{done['loss_first']:.3f} -> {done['loss_last']:.3f}{val}, {done['wall_s']:.0f} s")
        left = sum(p.steps for p in rest)
        line += f"; run: {total - left} of {total} steps, {(total - left) * self.throughput.tokens_per_step:,} tokens"
        ran = done["last_step"] - done["first_step"] + 1
        if rest and ran > 0:
            eta = left * done["wall_s"] / ran
            line += (f"; next {rest[0].name} ({rest[0].steps} steps), about "
                     + (f"{eta / 60:.0f} min" if eta >= 90 else f"{eta:.0f} s") + " left")
        return line

    def run_phase(self, plan: PhasePlan) -> Dict[str, Any]:
        s = self.state
        if s.phase != plan.name:
            s.phase, s.phase_step = plan.name, 0
            if self.spike is not None:
                self.spike.reset()  # a new data mix has a new loss level
        started = time.perf_counter()
        losses: Dict[int, float] = {}  # global step -> loss, of the steps this process ran
        val: Dict[int, float] = {}
        first_step = s.global_step + 1
        self.metrics.start_phase(plan.name, plan.steps, done=s.phase_step, overall=self._overall)
        while s.phase_step < plan.steps:
            record = self.train_step(plan)
            self._beat()
            losses[s.global_step] = record["loss"]
            self.metrics.progress(record)
            last = s.phase_step == plan.steps
            if s.global_step % self.log_every == 0 or last:
                self.metrics.log(record)
            self._count_nonfinite(record)
            if self.spike is not None and self.spike.observe(s.global_step, record["loss"]):
                self._roll_back(plan, record["loss"])
                losses = {k: v for k, v in losses.items() if k <= s.global_step}
                val = {k: v for k, v in val.items() if k <= s.global_step}
                continue
            if plan.val_loader is not None and (
                last or (self.eval_every and s.phase_step % self.eval_every == 0)
            ):
                self._slow_ahead()  # the first evaluation compiles its graph
                val[s.global_step] = self.evaluate(plan)
                self._beat()
                self.metrics.log(
                    {"kind": "val", "step": s.global_step, "phase": plan.name, "val_loss": val[s.global_step]}
                )
            if not last and self._save_due():
                self.save()
            if not last and self._stop_requested():
                break
        self.metrics.end_phase()
        if not self.stopped:
            s.phases_done.append(plan.name)
            self.save(tag=final_tag(plan.name))
        wall = time.perf_counter() - started
        steps = [losses[k] for k in sorted(losses)]
        vals = [val[k] for k in sorted(val)]
        return {
            "phase": plan.name,
            "steps": plan.steps,
            "first_step": first_step,
            "last_step": s.global_step,
            "stopped": bool(self.stopped),
            "tokens": plan.steps * self.throughput.tokens_per_step,
            "wall_s": wall,
            "loss_first": steps[0] if steps else None,
            "loss_last": steps[-1] if steps else None,
            "loss_start_mean": mean_of(steps, first=True) if steps else None,
            "loss_end_mean": mean_of(steps, first=False) if steps else None,
            "val_loss_first": vals[0] if vals else None,
            "val_loss_last": vals[-1] if vals else None,
            "lr_first": plan.lr.at(0),
            "lr_last": plan.lr.final,
            "tokens_per_s": len(steps) * self.throughput.tokens_per_step / wall if steps else None,
        }

    # ------------------------------------------------------------------ guards
    def _event(self, kind: str, **fields: Any) -> None:
        if self.events is not None:
            self.events.log(kind, **fields)

    def _fatal(self, error: PretrainRunError) -> PretrainRunError:
        """Log a guard's give-up in the events log before it ends the run."""
        self._event("error", step=self.state.global_step, reason=str(error))
        return error

    def _beat(self) -> None:
        if self.watchdog is not None:
            self.watchdog.beat(self.state.global_step)

    def _slow_ahead(self) -> None:
        """The next thing is slow (a save, a load, an evaluation that may compile): allow it the
        first-step timeout instead of the per-step one."""
        dog = self.watchdog
        if dog is not None:
            dog.beat(self.state.global_step, next_timeout_s=max(dog.timeout_s, dog.first_timeout_s))

    def _count_nonfinite(self, record: Dict[str, Any]) -> None:
        """The graph already skipped the update of a non-finite step (and the loss scale backed
        off); here it is logged and counted, and a run that keeps failing stops with an error."""
        if self.nonfinite is None:
            return
        if not record["finite"]:
            self._event(
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
            raise self._fatal(e) from None

    def _stop_requested(self) -> bool:
        """On SIGTERM/SIGINT: make sure a checkpoint of this step exists, log, set self.stopped."""
        if self.stop is None or not self.stop.requested:
            return False
        if self._saved_at != self.state.global_step:
            self._slow_ahead()
            self.save()
        self._event("signal", signal=self.stop.signal_name, step=self.state.global_step)
        self.stopped = self.stop.signal_name
        return True

    def _roll_back(self, plan: PhasePlan, loss: float) -> None:
        """A confirmed loss spike: back to the newest checkpoint from before the spike's first step
        (its weights never saw the spike's data), skip the spike's data window, continue."""
        s = self.state
        first, confirmed = self.spike.last_spike
        threshold = self.spike.threshold()
        self._event("spike", step=s.global_step, first_step=first, loss=loss, threshold=threshold)
        try:
            self.spike.record_rollback(s.global_step)  # raises past resilience.max_rollbacks
        except PretrainRunError as e:
            raise self._fatal(e) from None
        # The loss of step `first` is the first high one, so the update of step first-1 may be what
        # broke the model: its data is skipped and the checkpoint must predate it.
        phase_base = s.global_step - s.phase_step  # the global step before this phase's first
        windows = s.data_skips.get(plan.name, [])
        lo = data_index(max(first - 1 - phase_base - 1, 0), windows)
        hi = data_index(s.phase_step - 1, windows)
        skips = {**s.data_skips, plan.name: add_window(windows, lo, hi)}
        self._slow_ahead()
        info = self._rollback_target(before_step=first - 1)
        if info is None:
            raise self._fatal(PretrainRunError(
                f"loss spike at steps {first}..{confirmed} (loss {loss:.4g} > {threshold:.4g}) "
                f"and no checkpoint from before step {first - 1} to roll back to: lower the LR or save "
                f"earlier (train.save_every_steps)"
            ))
        saved = read_state(info)
        if saved.get("phase") != plan.name and saved.get("phase") not in saved.get("phases_done", []):
            raise self._fatal(PretrainRunError(
                f"loss spike in phase {plan.name}: the newest checkpoint from before it, {info.path}, is "
                f"in the middle of phase {saved.get('phase')}; a rollback stays within one phase: "
                f"resume from it (restart the run) or lower the LR"
            ))
        if self.saving:
            self.checkpoints.discard_from(info.step + 1, "rollback")  # a crash must not resume into the spike
        spiked_at = s.global_step
        self._load(self.checkpoints, info)
        self.state.data_skips = skips
        if self.state.phase != plan.name:  # rolled back to the previous phase's final checkpoint
            self.state.phase, self.state.phase_step = plan.name, 0
        self.spike.rewind(info.step)
        self.metrics.rewind(info.step)
        self.metrics.end_phase()
        self.metrics.start_phase(plan.name, plan.steps, done=self.state.phase_step, overall=self._overall)
        self._event("rollback", step=spiked_at, to_step=info.step, path=str(info.path),
                    spike=[first, confirmed])
        self._event("skip", step=info.step, what="data", phase=plan.name, data=[lo, hi],
                    steps=[first - 1, confirmed])
        self.save()  # the same step again, now recording the skipped window: a crash resumes past it
        self._beat()

    def _rollback_target(self, before_step: int) -> Any:
        """The checkpoint every rank rolls back to: the newest that verifies from before
        `before_step`. Under data parallelism the saving rank picks it once its async writer is done
        and the others take the step it picked, so no rank can see a different newest checkpoint."""
        if self.checkpoints is None:
            return None
        degree = int(getattr(self.step, "data_parallel", 1))
        if degree <= 1:
            return self.checkpoints.latest(before_step=before_step)
        mine = None
        if self.saving:
            self.checkpoints.wait()
            mine = self.checkpoints.latest(before_step=before_step)
        picked = int(ranks.all_sum(mine.step + 1 if mine is not None else 0, degree)) - 1
        if picked < 0:
            return None
        info = mine if self.saving else self.checkpoints.latest(before_step=picked + 1)
        if info is None or info.step != picked:
            raise self._fatal(PretrainRunError(
                f"loss spike rollback: the saving rank rolls back to step {picked}, but this rank finds "
                f"{info.path if info else 'no checkpoint'} in {self.checkpoints.directory}: every rank "
                f"must see the same checkpoint directory (shared storage)"
            ))
        return info

    # ------------------------------------------------------------------ checkpoints
    def _save_due(self) -> bool:
        if self.checkpoints is None or not self.saving:
            return False
        by_steps = self.save_every_steps and self.state.global_step % self.save_every_steps == 0
        by_time = self.save_every_s and time.monotonic() - self._last_save >= self.save_every_s
        return bool(by_steps or by_time)

    def checkpoint_state(self) -> Dict[str, Any]:
        import mindspore as ms

        self.state.loss_scale = self.step.scaler_state()
        state = {**self.state.to_dict(), "model": self.arch}
        # Dropout is off, but the generator is the run's whole RNG state: saved so a model that
        # uses it resumes on the same random stream. The data stream is a function of the step.
        state["rng"] = [int(x) for x in ms.get_rng_state().asnumpy().tolist()]
        if self.spike is not None:
            state["spike_guard"] = self.spike.state_dict()
        if self.nonfinite is not None:
            state["nonfinite_guard"] = self.nonfinite.state_dict()
        if self.run_config is not None:
            state["config"] = self.run_config
        return state

    def save(self, tag: Optional[str] = None) -> None:
        if self.checkpoints is not None and self.saving:
            self._slow_ahead()
            writing = time.perf_counter()
            path = self.checkpoints.save(
                self.state.global_step, self.step.optimizer, self.checkpoint_state(), tag=tag
            )
            self.metrics.note(f"saved step {self.state.global_step} in {time.perf_counter() - writing:.1f} s: {path}")
            self._beat()
        self._last_save = time.monotonic()
        self._saved_at = self.state.global_step

    def restore(self, checkpoints: Any, info: Any) -> TrainState:
        """Load a checkpoint's weights, optimizer moments, TrainState, RNG and guard states into this
        trainer; the metrics log forgets what came after it (those steps run again)."""
        state = self._load(checkpoints, info)
        if self.spike is not None and "spike_guard" in state:
            self.spike.load_state_dict(state["spike_guard"])
        if self.nonfinite is not None and "nonfinite_guard" in state:
            self.nonfinite.load_state_dict(state["nonfinite_guard"])
        self.metrics.rewind(self.state.global_step)
        return self.state

    def _load(self, checkpoints: Any, info: Any) -> Dict[str, Any]:
        import mindspore as ms

        saved = read_state(info)
        check_same_arch(saved.get("model", {}), self.arch, info.path)
        state = checkpoints.load(info, self.step.optimizer)
        # In place: the running loop holds this object across a rollback.
        vars(self.state).update(vars(TrainState.from_dict(state)))
        self.step.load_scaler_state(self.state.loss_scale)
        if "rng" in state:
            ms.set_rng_state(ms.Tensor(state["rng"], ms.uint8))
        self._saved_at = self.state.global_step
        self._last_save = time.monotonic()
        return state
