"""A stand-in training step around the real Trainer: one real MindSpore Parameter whose loss is a
function of the data index, so a poisoned window of data makes a spike exactly where a test puts it
(used by the fast and the slow resilience-loop tests)."""
import numpy as np

from pretrain.resilience.checkpoint import CheckpointManager
from pretrain.resilience.events import EventLog
from pretrain.resilience.nonfinite import NonFiniteGuard
from pretrain.resilience.spike import SpikeGuard
from pretrain.train.metrics import MetricsWriter
from pretrain.train.schedule import PhaseLR
from pretrain.train.trainer import PhaseInputs, Throughput, Trainer


class ToyStep:
    """TrainStep's interface around one Parameter `w` (updates done: what a checkpoint must carry).
    Loss = 5 - 0.01 w, plus 10 on poisoned data; a NaN loss mask is a non-finite step whose update
    is skipped, as the real graph does."""

    def __init__(self, poison=()):
        import mindspore as ms
        from mindspore import Parameter, Tensor, nn

        class Weights(nn.Cell):
            def __init__(self):
                super().__init__()
                self.w = Parameter(Tensor(np.zeros(1, np.float32)), name="w")

        self.optimizer = Weights()
        self.poison = set(poison)
        self.ms = ms

    @property
    def updates(self):
        return float(self.optimizer.w.asnumpy()[0])

    def step(self, micro_batches, lr):
        batch = micro_batches[0]
        index = int(batch["input_ids"][0, 0])
        finite = bool(np.isfinite(batch["loss_mask"]).all())
        loss = 5.0 - 0.01 * self.updates + (10.0 if index in self.poison else 0.0)
        if finite:
            self.optimizer.w.set_data(self.ms.Tensor(np.array([self.updates + 1], np.float32)))
        return {"loss": loss if finite else float("nan"), "grad_norm": 1.0 if finite else float("nan"),
                "finite": finite, "loss_scale": 1.0}

    def scaler_state(self):
        return {}

    def load_scaler_state(self, state):
        pass


class ToyLoader:
    def __init__(self, nan=()):
        self.nan = set(nan)

    def batch(self, i):
        mask = np.full((1, 1), np.nan if i in self.nan else 1.0, np.float32)
        return {"input_ids": np.array([[i]]), "labels": np.array([[i]]), "loss_mask": mask}


def phase_inputs(steps=20, name="general", nan=()):
    lr = PhaseLR(name, steps, start=0.0, peak=1e-3, end=1e-4, warmup_steps=0, schedule="linear")
    return PhaseInputs(name, lr, ToyLoader(nan), None)


def make_trainer(tmp_path, poison=(), save_every=3, max_rollbacks=3, max_nonfinite=3, writes_run_files=True,
                 async_save=False, warmup=3):
    events = EventLog(tmp_path / "events.jsonl")
    checkpoints = CheckpointManager(tmp_path / "ckpt", keep_latest=5, events=events, async_save=async_save)
    trainer = Trainer(
        ToyStep(poison),
        metrics=MetricsWriter(tmp_path),
        throughput=Throughput(tokens_per_step=1, devices=1, flops_per_token=1.0, peak_flops=1.0),
        grad_accum=1,
        arch={"toy": 1},
        checkpoints=checkpoints,
        save_every_steps=save_every,
        writes_run_files=writes_run_files,
        events=events,
        spike=SpikeGuard(ratio=2.0, consecutive=3, window=5, warmup_steps=warmup,
                         max_rollbacks=max_rollbacks),
        nonfinite=NonFiniteGuard(max_consecutive=max_nonfinite),
    )
    return trainer, checkpoints, events
