"""One Trainer: one `train_step()` per optimizer step, all resumable state in `TrainState`, and
the checkpoint save / load of that state. The loop around it is pretrain/train/loop.py; the
resilience guards it consults are one component, pretrain/resilience/keeper.py (`trainer.keeper`).

Nothing hides in iterators: the batch of a step is `loader.batch(state.phase_step)` and its LR is
`schedule.at(state.phase_step)`, so restoring a TrainState (and the weights + optimizer moments
the checkpoint holds) continues exactly where the run stopped. (After a loss-spike rollback the
batch index skips the spike's data windows, which TrainState.data_skips records.)
"""

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional

from pretrain.config.errors import PretrainRunError
from pretrain.resilience.checkpoint import read_state
from pretrain.resilience.identity import check_same_arch
from pretrain.resilience.keeper import Keeper
from pretrain.resilience.skips import data_index
from pretrain.train import ranks
from pretrain.train.metrics import MetricsWriter, host_memory_gb
from pretrain.train.schedule import PhaseLR

# lazy imports (mindspore): by design, its 3-10 s import stays out of planning and dry runs


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
    # the first metrics.WINDOW losses of `phase`: a resumed phase's summary still starts at its first step
    phase_losses: List[float] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "TrainState":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


@dataclass
class PhaseInputs:
    """What one phase of the curriculum trains on (pretrain.train.build.phase_inputs)."""
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
        writes_run_files: bool = True,
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
        self.checkpoints = checkpoints
        self.writes_run_files = bool(writes_run_files)
        self.save_every_steps = int(save_every_steps)
        self.save_every_s = float(save_every_minutes) * 60.0
        self.keeper = Keeper(checkpoints=checkpoints, writes_run_files=writes_run_files, events=events,
                             spike=spike, nonfinite=nonfinite, all_sum=ranks.all_sum,
                             data_parallel=int(getattr(step, "data_parallel", 1)))
        self.run_config = run_config  # saved with each checkpoint: what a resume compares against
        self.data_identity: Optional[Dict[str, Any]] = None  # identity.data_identity, saved likewise
        self.state = TrainState()
        self._last_save = time.monotonic()
        self.saved_at = 0  # global step of the newest checkpoint this process wrote or loaded
        self.steps_run = 0  # optimizer steps this process ran (its first compiled the graph)
        self.save_times: List[float] = []  # seconds each save of this process held the loop
        self.overall = ""  # "[k/n] ": which of the run's phases the console is showing

    # ------------------------------------------------------------------ one step
    def train_step(self, phase: PhaseInputs) -> Dict[str, Any]:
        """One optimizer step at state.phase_step of `phase`; advances the state; returns its record."""
        s = self.state
        started = time.perf_counter()
        lr = phase.lr.at(s.phase_step)
        index = data_index(s.phase_step, s.data_skips.get(phase.name, ()))
        batch = phase.loader.batch(index)
        out = self.step.step(split_micro(batch, self.grad_accum), lr)
        step_time = time.perf_counter() - started
        self.steps_run += 1
        s.global_step += 1
        s.phase_step += 1
        s.lr = lr
        tp = self.throughput
        tokens_per_s = tp.tokens_per_step / step_time
        return {
            "kind": "train",
            "step": s.global_step,
            "phase": phase.name,
            "phase_step": s.phase_step,
            "data_index": index,
            "loss": out["loss"],  # token-weighted over the whole global batch (step.py)
            "lr": lr,
            "grad_norm": out["grad_norm"],
            "loss_scale": out["loss_scale"],
            "finite": out["finite"],
            "tokens_per_s": tokens_per_s,
            "mfu": tokens_per_s / tp.devices * tp.flops_per_token / tp.peak_flops,
            "step_time_s": step_time,
            "host_mem_gb": host_memory_gb(),
            **out.get("moe", {}),   # MoE: expert_load_max_over_mean, expert_tokens_dropped
        }

    def evaluate(self, phase: PhaseInputs) -> float:
        """LM loss over the phase's first eval_batches validation batches (the same ones every
        time, so the curve compares like with like), token-weighted like the training loss."""
        sums = [self.step.evaluate_sums(phase.val_loader.batch(i)) for i in range(self.eval_batches)]
        return sum(lm for lm, _ in sums) / max(sum(n for _, n in sums), 1.0)

    # ------------------------------------------------------------------ checkpoints
    def save_due(self) -> bool:
        if self.checkpoints is None or not self.writes_run_files:
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
        if self.keeper.spike is not None:
            state["spike_guard"] = self.keeper.spike.state_dict()
        if self.keeper.nonfinite is not None:
            state["nonfinite_guard"] = self.keeper.nonfinite.state_dict()
        if self.run_config is not None:
            state["config"] = self.run_config
        if self.data_identity is not None:
            state["data"] = self.data_identity
        return state

    def save(self, tag: Optional[str] = None) -> None:
        if self.checkpoints is not None and self.writes_run_files:
            self.keeper.slow_ahead(self.state.global_step)
            writing = time.perf_counter()
            path = self.checkpoints.save(
                self.state.global_step, self.step.optimizer, self.checkpoint_state(), tag=tag
            )
            took = time.perf_counter() - writing
            self.save_times.append(took)
            if self.checkpoints.async_save:   # written by a thread: a failure surfaces at the next save
                self.metrics.note(f"saving step {self.state.global_step} in the background (snapshot in "
                                  f"{took:.1f} s): {path}")
            else:
                self.metrics.note(f"saved step {self.state.global_step} in {took:.1f} s: {path}")
            self.keeper.beat(self.state.global_step)
        self._last_save = time.monotonic()
        self.saved_at = self.state.global_step

    def restore(self, checkpoints: Any, info: Any) -> TrainState:
        """Load a checkpoint's weights, optimizer moments, TrainState, RNG and guard states into this
        trainer; the metrics log forgets what came after it (those steps run again)."""
        state = self.load(checkpoints, info)
        if self.keeper.spike is not None and "spike_guard" in state:
            self.keeper.spike.load_state_dict(state["spike_guard"])
        if self.keeper.nonfinite is not None and "nonfinite_guard" in state:
            self.keeper.nonfinite.load_state_dict(state["nonfinite_guard"])
        self.metrics.rewind(self.state.global_step)
        return self.state

    def load(self, checkpoints: Any, info: Any) -> Dict[str, Any]:
        import mindspore as ms

        saved = read_state(info)
        check_same_arch(saved.get("model", {}), self.arch, info.path)
        state = checkpoints.load(info, self.step.optimizer)
        # In place: the running loop holds this object across a rollback.
        vars(self.state).update(vars(TrainState.from_dict(state)))
        self.step.load_scaler_state(self.state.loss_scale)
        if "rng" in state:
            ms.set_rng_state(ms.Tensor(state["rng"], ms.uint8))
        self.saved_at = self.state.global_step
        self._last_save = time.monotonic()
        return state
