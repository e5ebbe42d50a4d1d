"""The GRAPH-mode training step around the MindFormers model (imports mindspore; load lazily).

One optimizer step = grad_accum micro-batches. `accumulate_cell` (micro-batches 1..A-1) adds their
gradients into fp32 buffers; `update_cell` (the last one) adds its own, averages, unscales (dynamic
loss scaling), measures the global norm, clips, and applies AdamW — skipping the update when any
gradient is non-finite, so such values never reach the weights. The learning rate is an input
tensor assigned to the optimizer's `learning_rate` parameter inside the graph, so the graph
compiles once for the whole run however the schedule moves.

Data parallel (MindSpore's DATA_PARALLEL context, one msrun rank per replica): the update cell
all-reduces the (accumulated) gradients to their mean over the ranks before unscaling, the norm,
the clip and AdamW, so every replica applies the same update and the weights stay identical; the
losses it returns (and the evaluation loss) are the mean over the ranks, so rank 0 logs the loss
of the global batch. One process: no collective is built.
"""

from functools import partial
from typing import Any, Dict, Optional, Tuple

import mindspore as ms
import numpy as np
from mindspore import Parameter, Tensor, nn, ops
from mindspore.amp import DynamicLossScaler

_hyper_map = ops.HyperMap()


def data_parallel_degree() -> int:
    """Ranks whose gradients this step must average itself: the group size under DATA_PARALLEL
    (semi-auto parallel inserts its own gradient reduction), else 1."""
    if ms.get_auto_parallel_context("parallel_mode") != "data_parallel":
        return 1
    from mindspore.communication import get_group_size

    return int(get_group_size())


class RankMean(nn.Cell):
    """Mean of a tensor over the data-parallel ranks (CPU's AllReduce only sums)."""

    def __init__(self, degree: int):
        super().__init__(auto_prefix=False)
        self.degree = float(degree)
        self.all_reduce = ops.AllReduce()

    def construct(self, x):
        return self.all_reduce(x) / self.degree


class LossCell(nn.Cell):
    """(objective, lm_loss) of one micro-batch.

    Without z-loss the objective is what MindFormers' own Mcore wrapper optimises: LM cross entropy
    plus the model's auxiliary terms (MoE balance, MTP, indexer; zeros for a dense model). With
    z-loss (PaLM: z · log²Z per token) the model runs in its logits mode, because MindFormers' loss
    has no z-loss term, and the cross entropy is computed here from the same log-partition."""

    def __init__(self, net: nn.Cell, z_loss: float = 0.0):
        super().__init__(auto_prefix=False)
        self.net = net
        self.z_loss = float(z_loss)
        if self.z_loss > 0:
            net.set_train(False)  # MindFormers' GPTModel returns fp32 logits [B·S, V] when not training

    def construct(self, input_ids, labels, loss_mask):
        if self.z_loss > 0:
            logits = self.net(input_ids=input_ids, labels=labels, loss_mask=loss_mask)
            flat_labels = ops.reshape(labels, (-1, 1))
            flat_mask = ops.reshape(loss_mask, (-1,))
            log_z = ops.logsumexp(logits, -1)
            picked = ops.reshape(ops.gather_elements(logits, 1, flat_labels), (-1,))
            denom = ops.maximum(flat_mask.sum(), 1.0)
            lm = ((log_z - picked) * flat_mask).sum() / denom
            objective = lm + self.z_loss * (ops.square(log_z) * flat_mask).sum() / denom
            return objective, lm
        lm, mtp, aux, indexer = self.net(input_ids=input_ids, labels=labels, loss_mask=loss_mask)
        objective = ops.reshape(lm + aux + indexer + mtp, ())
        return objective, ops.reshape(lm, ())


class EvalCell(nn.Cell):
    """LM cross entropy of one batch, forward only (validation)."""

    def __init__(self, loss_cell: LossCell, rank_mean: Optional[RankMean] = None):
        super().__init__(auto_prefix=False)
        self.loss_cell = loss_cell
        self.rank_mean = rank_mean

    def construct(self, input_ids, labels, loss_mask):
        lm = self.loss_cell(input_ids, labels, loss_mask)[1]
        if self.rank_mean is not None:
            lm = self.rank_mean(lm)
        return lm


class TrainStepCell(nn.Cell):
    def __init__(
        self,
        loss_cell: LossCell,
        optimizer: nn.Optimizer,
        *,
        grad_accum: int,
        grad_clip: float,
        scaler: Optional[DynamicLossScaler],
        last: bool,
        data_parallel: int = 1,
    ):
        super().__init__(auto_prefix=False)
        self.loss_cell = loss_cell
        self.optimizer = optimizer
        self.weights = optimizer.parameters
        self.grad_accum = int(grad_accum)
        self.grad_clip = float(grad_clip)
        self.scaler = scaler
        self.last = last  # True: the update step; False: an accumulate-only step
        self.grad = ops.GradOperation(get_by_list=True, sens_param=True)
        self.accum: Optional[Tuple[Parameter, ...]] = None
        self.rank_mean = RankMean(data_parallel) if data_parallel > 1 else None
        # The mean over the ranks of the gradients of the whole (accumulated) step: one all-reduce
        # per step, on the update cell only.
        self.reducer = (
            nn.DistributedGradReducer(self.weights, mean=True, degree=data_parallel)
            if data_parallel > 1 and last
            else None
        )

    def _grads(self, input_ids, labels, loss_mask):
        objective, lm = self.loss_cell(input_ids, labels, loss_mask)
        scale = self.scaler.scale_value if self.scaler is not None else ops.ones((), ms.float32)
        sens = (ops.ones_like(objective) * scale, ops.zeros_like(lm))
        grads = self.grad(self.loss_cell, self.weights)(input_ids, labels, loss_mask, sens)
        return lm, grads

    def construct(self, input_ids, labels, loss_mask, lr):
        lm, grads = self._grads(input_ids, labels, loss_mask)
        if self.rank_mean is not None:
            lm = self.rank_mean(lm)
        if not self.last:
            return ops.depend(lm, _hyper_map(ops.assign_add, self.accum, grads))
        if self.grad_accum > 1:
            grads = _hyper_map(ops.partial(_average, float(self.grad_accum)), self.accum, grads)
            lm = ops.depend(lm, _hyper_map(_zero, self.accum))
        if self.reducer is not None:
            # Before the finite check: a NaN on any rank makes every rank skip the same update.
            grads = self.reducer(grads)
        if self.scaler is not None:
            grads = self.scaler.unscale(grads)
            loss_scale = self.scaler.scale_value * 1.0
        else:
            loss_scale = ops.ones((), ms.float32)
        norm = ops.sqrt(ops.addn(_hyper_map(_square_sum, grads)))
        # A NaN or Inf anywhere makes the norm non-finite: one pass over the gradients, not two.
        finite = ops.isfinite(norm)
        if self.scaler is not None:
            finite = ops.depend(finite, self.scaler.adjust(finite))
        clip = ops.minimum(ops.ones((), ms.float32), self.grad_clip / (norm + 1e-6))
        grads = _hyper_map(ops.partial(_mul, clip), grads)
        lm = ops.depend(lm, ops.assign(self.optimizer.learning_rate, lr))
        if finite:
            lm = ops.depend(lm, self.optimizer(grads))
        return lm, norm, finite, loss_scale


def train_step_args(cfg: Any) -> Dict[str, Any]:
    """TrainStep's keyword arguments (all but lr) from a composed run config."""
    t = cfg.train
    return dict(weight_decay=t.weight_decay, betas=(t.adam_beta1, t.adam_beta2), eps=t.adam_eps,
                grad_accum=int(t.grad_accum), grad_clip=t.grad_clip,
                loss_scaling=cfg.hardware.device != "cpu", z_loss=t.z_loss)


class TrainStep:
    """The compiled pieces of one training run: update (+ accumulate) and evaluate."""

    def __init__(
        self,
        net: nn.Cell,
        *,
        lr: float,
        weight_decay: float,
        betas: Tuple[float, float],
        eps: float,
        grad_accum: int,
        grad_clip: float,
        loss_scaling: bool,
        z_loss: float = 0.0,
    ):
        self.net = net
        self.loss_cell = LossCell(net, z_loss)
        params = net.trainable_params()
        # AdamW decays matrices only: norm gains (1-D) keep their scale (Megatron, OLMo).
        groups = [
            {"params": [p for p in params if len(p.shape) >= 2], "weight_decay": float(weight_decay)},
            {"params": [p for p in params if len(p.shape) < 2], "weight_decay": 0.0},
        ]
        groups = [g for g in groups if g["params"]]
        self.optimizer = nn.AdamWeightDecay(
            groups,
            learning_rate=Tensor(float(lr), ms.float32),
            beta1=float(betas[0]),
            beta2=float(betas[1]),
            eps=float(eps),
        )
        self.scaler = (
            DynamicLossScaler(scale_value=2.0**16, scale_factor=2, scale_window=1000)
            if loss_scaling
            else None
        )
        self.grad_accum = int(grad_accum)
        self.data_parallel = data_parallel_degree()
        # the update cell and the accumulate-only cell share everything but `last` and the buffers
        cell = partial(TrainStepCell, self.loss_cell, self.optimizer, grad_accum=grad_accum,
                       grad_clip=grad_clip, scaler=self.scaler, data_parallel=self.data_parallel)
        self.update_cell = cell(last=True)
        self.accumulate_cell = None
        if self.grad_accum > 1:
            accum = tuple(
                Parameter(ops.zeros(p.shape, ms.float32), name=f"accum.{p.name}", requires_grad=False)
                for p in self.optimizer.parameters
            )
            self.update_cell.accum = accum
            self.accumulate_cell = cell(last=False)
            self.accumulate_cell.accum = accum
        self.eval_cell = EvalCell(self.loss_cell, RankMean(self.data_parallel) if self.data_parallel > 1 else None)

    def step(self, micro_batches, lr: float) -> Dict[str, Any]:
        """One optimizer step over `micro_batches` (a list of dicts of numpy arrays, len grad_accum)."""
        lms = []
        lr_t = Tensor(lr, ms.float32)
        for batch in micro_batches[:-1]:
            lms.append(self.accumulate_cell(*_inputs(batch), lr_t))
        lm, norm, finite, loss_scale = self.update_cell(*_inputs(micro_batches[-1]), lr_t)
        lms.append(lm)
        return {
            "loss": float(np.mean([float(x.asnumpy()) for x in lms])),
            "grad_norm": float(norm.asnumpy()),
            "finite": bool(finite.asnumpy()),
            "loss_scale": float(loss_scale.asnumpy()),
        }

    def evaluate(self, batch) -> float:
        return float(self.eval_cell(*_inputs(batch)).asnumpy())

    @property
    def applied_lr(self) -> float:
        return float(self.optimizer.learning_rate.asnumpy())

    def scaler_state(self) -> Dict[str, float]:
        if self.scaler is None:
            return {}
        return {
            "scale_value": float(self.scaler.scale_value.asnumpy()),
            "counter": int(self.scaler.counter.asnumpy()),
        }

    def load_scaler_state(self, state: Dict[str, float]) -> None:
        if self.scaler is not None and state:
            # copy_ writes in place: after a loss-spike rollback the graph is compiled, and it never
            # sees a buffer that set_data swaps in
            self.scaler.scale_value.copy_(Tensor(float(state["scale_value"]), ms.float32))
            self.scaler.counter.copy_(Tensor(int(state["counter"]), ms.int32))


def _average(n, acc, grad):
    return (acc + grad) / n


def _zero(acc):
    return ops.assign(acc, ops.zeros_like(acc))


def _square_sum(grad):
    return ops.reduce_sum(ops.square(grad))


def _mul(factor, grad):
    return grad * factor


def _inputs(batch):
    return (
        Tensor(batch["input_ids"], ms.int32),
        Tensor(batch["labels"], ms.int32),
        Tensor(batch["loss_mask"], ms.float32),
    )
