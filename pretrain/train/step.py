"""The GRAPH-mode training step around the MindFormers model (imports mindspore; load lazily).

One optimizer step = grad_accum micro-batches. `accumulate_cell` (micro-batches 1..A-1) adds their
gradients, loss sums and valid-token counts into fp32 buffers; `update_cell` (the last one) adds
its own, measures the global norm, divides by the step's valid-token count, unscales (dynamic
loss scaling) and clips in one pass, and applies AdamW, skipping the update when any gradient is
non-finite, so such values never reach the weights. The learning rate is an input tensor assigned
to the optimizer's `learning_rate` parameter inside the graph, so the graph compiles once for the
whole run however the schedule moves.

The loss is token-weighted over the whole global batch: the model runs with MindFormers'
calculate_per_token_loss and returns the sum of its valid tokens' cross entropy; sums and token
counts are added over micro-batches and data-parallel ranks and divided once, so a micro-batch or a
rank with few valid tokens (padding, short documents) weighs what its tokens weigh, not a whole
micro-batch's share (a mean of per-micro-batch means would).

Data parallel (MindSpore's DATA_PARALLEL context, one msrun rank per replica): the update cell
all-reduces (sums) the accumulated gradients, loss sums and token counts over the ranks before the
division, unscaling, the norm, the clip and AdamW, so every replica applies the same update and the
weights stay identical, and the loss it returns (and the evaluation loss) is that of the global
batch on every rank. One process: no collective is built.

The model's inputs besides ids, labels and loss mask are those of the run's document-attention
mode (pretrain/train/inputs.py): position_ids, and the block-diagonal attention_mask (CPU) or
actual_seq_len (Ascend's compressed EOD mask); every cell takes (…, position_ids, doc) and feeds the
model only what its mode uses.
"""

import statistics
import time
from functools import partial
from typing import Any, Dict, Optional, Tuple

import mindspore as ms
import numpy as np
from mindspore import Parameter, Tensor, nn, ops
from mindspore.amp import DynamicLossScaler

from pretrain.model import mindformers_config, moe_load
from pretrain.train.inputs import model_arrays

# lazy imports (mindspore): the step's module imports it at the top; these name its submodules where used

_hyper_map = ops.HyperMap()


def data_parallel_degree() -> int:
    """Ranks whose gradients this step must average itself: the group size under DATA_PARALLEL
    (semi-auto parallel inserts its own gradient reduction), else 1."""
    if ms.get_auto_parallel_context("parallel_mode") != "data_parallel":
        return 1
    from mindspore.communication import get_group_size

    return int(get_group_size())


class RankSum(nn.Cell):
    """Sum of a tensor over the data-parallel ranks."""

    def __init__(self):
        super().__init__(auto_prefix=False)
        self.all_reduce = ops.AllReduce()

    def construct(self, x):
        return self.all_reduce(x)


class GradSum(nn.Cell):
    """The step's gradient all-reduce alone (the same reducer over the same parameters), timed after
    training to give the measured communication share of a data-parallel step."""

    def __init__(self, weights, degree: int):
        super().__init__(auto_prefix=False)
        self.reducer = nn.DistributedGradReducer(weights, mean=False, degree=degree)

    def construct(self, grads):
        return self.reducer(grads)


class LossCell(nn.Cell):
    """(objective sum, LM cross-entropy sum, valid tokens) of one micro-batch.

    Without z-loss the objective is what MindFormers' own Mcore wrapper optimises under
    calculate_per_token_loss: the LM cross-entropy sum plus the model's auxiliary terms (MTP sum;
    MoE balance and indexer losses, which the model scales by the token count; zeros for a dense
    model). With z-loss (PaLM: z · log²Z per token) the model runs in its logits mode, because
    MindFormers' loss has no z-loss term, and the cross entropy is computed here from the same
    log-partition. The caller divides by the token count of the whole global batch."""

    def __init__(self, net: nn.Cell, z_loss: float = 0.0, *, attention: str):
        super().__init__(auto_prefix=False)
        self.net = net
        self.z_loss = float(z_loss)
        self.attention = attention  # pretrain.train.inputs.MODES
        if self.z_loss > 0:
            net.set_train(False)  # MindFormers' GPTModel returns fp32 logits [B·S, V] when not training

    def _model(self, input_ids, labels, loss_mask, position_ids, doc):
        if self.attention == "mask":
            return self.net(input_ids=input_ids, position_ids=position_ids, attention_mask=doc,
                            labels=labels, loss_mask=loss_mask)
        if self.attention == "compressed":
            return self.net(input_ids=input_ids, position_ids=position_ids, actual_seq_len=doc,
                            labels=labels, loss_mask=loss_mask)
        return self.net(input_ids=input_ids, labels=labels, loss_mask=loss_mask)

    def construct(self, input_ids, labels, loss_mask, position_ids, doc):
        tokens = loss_mask.sum()
        if self.z_loss > 0:
            logits = self._model(input_ids, labels, loss_mask, position_ids, doc)
            flat_labels = ops.reshape(labels, (-1, 1))
            flat_mask = ops.reshape(loss_mask, (-1,))
            log_z = ops.logsumexp(logits, -1)
            picked = ops.reshape(ops.gather_elements(logits, 1, flat_labels), (-1,))
            lm = ((log_z - picked) * flat_mask).sum()
            objective = lm + self.z_loss * (ops.square(log_z) * flat_mask).sum()
            return objective, lm, tokens
        lm, _, mtp, _, aux, indexer = self._model(input_ids, labels, loss_mask, position_ids, doc)
        objective = ops.reshape(lm + aux + indexer + mtp, ())
        return objective, ops.reshape(lm, ()), tokens


class EvalCell(nn.Cell):
    """(LM cross-entropy sum, valid tokens) of one batch over all ranks, forward only (validation)."""

    def __init__(self, loss_cell: LossCell, rank_sum: Optional[RankSum] = None):
        super().__init__(auto_prefix=False)
        self.loss_cell = loss_cell
        self.rank_sum = rank_sum

    def construct(self, input_ids, labels, loss_mask, position_ids, doc):
        _, lm, tokens = self.loss_cell(input_ids, labels, loss_mask, position_ids, doc)
        if self.rank_sum is not None:
            lm, tokens = self.rank_sum(lm), self.rank_sum(tokens)
        return lm, tokens


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
        # set by TrainStep when grad_accum > 1: gradient buffers and (LM sum, tokens), shared by both cells
        self.accum: Optional[Tuple[Parameter, ...]] = None
        self.accum_lm: Optional[Parameter] = None
        self.accum_tokens: Optional[Parameter] = None
        # The sum over the ranks of the gradients, loss sums and token counts of the whole
        # (accumulated) step: one all-reduce per step, on the update cell only.
        self.rank_sum = RankSum() if data_parallel > 1 and last else None
        self.reducer = (
            nn.DistributedGradReducer(self.weights, mean=False, degree=data_parallel)
            if data_parallel > 1 and last
            else None
        )

    def construct(self, input_ids, labels, loss_mask, position_ids, doc, lr):
        objective, lm, tokens = self.loss_cell(input_ids, labels, loss_mask, position_ids, doc)
        scale = self.scaler.scale_value if self.scaler is not None else ops.ones((), ms.float32)
        sens = (ops.ones_like(objective) * scale, ops.zeros_like(lm), ops.zeros_like(tokens))
        grads = self.grad(self.loss_cell, self.weights)(input_ids, labels, loss_mask, position_ids, doc, sens)
        if not self.last:
            lm = ops.depend(lm, ops.assign_add(self.accum_lm, lm))
            lm = ops.depend(lm, ops.assign_add(self.accum_tokens, tokens))
            return ops.depend(lm, _hyper_map(ops.assign_add, self.accum, grads))
        if self.grad_accum > 1:
            grads = _hyper_map(_add, self.accum, grads)
            lm = lm + self.accum_lm
            tokens = tokens + self.accum_tokens
            lm = ops.depend(lm, _hyper_map(_zero, self.accum))
            lm = ops.depend(lm, _zero(self.accum_lm))
            tokens = ops.depend(tokens, _zero(self.accum_tokens))
        if self.reducer is not None:
            # Before the finite check: a NaN on any rank makes every rank skip the same update.
            grads = self.reducer(grads)
            lm, tokens = self.rank_sum(lm), self.rank_sum(tokens)
        # a global batch without a valid token contributes nothing (0 / 1), not NaN
        denom = ops.maximum(tokens, ops.ones((), ms.float32))
        lm = lm / denom
        if self.scaler is not None:
            loss_scale = self.scaler.scale_value * 1.0
        else:
            loss_scale = ops.ones((), ms.float32)
        divisor = denom * loss_scale   # what the summed, scaled gradients are divided by
        # One pass measures the raw (summed, scaled) gradients, one more applies the token division,
        # the unscaling and the clip together: ||g / d|| = ||g|| / d, so nothing is divided first.
        # A NaN or Inf anywhere (or a sum of squares past fp32's range) makes the norm non-finite.
        norm = ops.sqrt(ops.addn(_hyper_map(_square_sum, grads))) / divisor
        finite = ops.isfinite(norm)
        if self.scaler is not None:
            finite = ops.depend(finite, self.scaler.adjust(finite))
        factor = ops.ones((), ms.float32) / divisor
        if self.grad_clip > 0:   # 0: no clipping
            factor = factor * ops.minimum(ops.ones((), ms.float32), self.grad_clip / (norm + 1e-6))
        grads = _hyper_map(ops.partial(_mul, factor), grads)
        lm = ops.depend(lm, ops.assign(self.optimizer.learning_rate, lr))
        if finite:
            lm = ops.depend(lm, self.optimizer(grads))
        return lm, norm, finite, loss_scale, tokens


def train_step_args(cfg: Any) -> Dict[str, Any]:
    """TrainStep's keyword arguments (all but lr) from a composed run config."""
    t = cfg.train
    return dict(weight_decay=t.weight_decay, betas=(t.adam_beta1, t.adam_beta2), eps=t.adam_eps,
                grad_accum=int(t.grad_accum), grad_clip=t.grad_clip,
                loss_scaling=cfg.hardware.device != "cpu", z_loss=t.z_loss,
                attention=mindformers_config.document_attention(cfg))


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
        attention: str,
        z_loss: float = 0.0,
    ):
        # attention: the model's document-attention mode (mindformers_config.document_attention of
        # the config it was built from), no default: a model built with use_eod_reset fed no
        # position_ids fails deep in graph compilation
        self.net = net
        self.attention = attention
        self.loss_cell = LossCell(net, z_loss, attention=attention)
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
            sums = [Parameter(ops.zeros((), ms.float32), name=f"accum.{n}", requires_grad=False)
                    for n in ("lm_sum", "tokens")]
            self.accumulate_cell = cell(last=False)
            for c in (self.update_cell, self.accumulate_cell):
                c.accum, (c.accum_lm, c.accum_tokens) = accum, sums
        self.eval_cell = EvalCell(self.loss_cell, RankSum() if self.data_parallel > 1 else None)
        self.expert_load = moe_load.ExpertLoad(net, self.data_parallel)   # empty for a dense model

    def step(self, micro_batches, lr: float) -> Dict[str, Any]:
        """One optimizer step over `micro_batches` (a list of dicts of numpy arrays, len grad_accum).
        loss: the LM cross entropy of the step's whole global batch, token-weighted."""
        lr_t = Tensor(lr, ms.float32)
        if self.expert_load:
            self.expert_load.reset()
        for batch in micro_batches[:-1]:
            self.accumulate_cell(*self.inputs(batch), lr_t)
        lm, norm, finite, loss_scale, tokens = self.update_cell(*self.inputs(micro_batches[-1]), lr_t)
        out = {
            "loss": float(lm.asnumpy()),
            "grad_norm": float(norm.asnumpy()),
            "finite": bool(finite.asnumpy()),
            "loss_scale": float(loss_scale.asnumpy()),
            "tokens": float(tokens.asnumpy()),  # valid tokens of the global batch (NaN if poisoned)
        }
        if self.expert_load:   # MoE on CPU: tokens per expert of this step (pretrain/model/moe_load.py)
            out["moe"] = self.expert_load.metrics()
        return out

    def allreduce_s(self, repeats: int = 5) -> Optional[float]:
        """Median seconds of the step's gradient all-reduce over the data-parallel ranks (None on one).
        A collective: every rank calls it at the same point, after its compile. Within the step the
        reduction runs after the backward pass (no overlap on CPU), so this is its exposed share."""
        if self.data_parallel <= 1:
            return None
        weights = self.optimizer.parameters
        cell = GradSum(weights, self.data_parallel)
        grads = tuple(ops.zeros(p.shape, p.dtype) for p in weights)
        cell(grads)   # compiles
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            out = cell(grads)
            out[0].asnumpy()   # wait for it
            times.append(time.perf_counter() - started)
        return statistics.median(times)

    def evaluate_sums(self, batch) -> Tuple[float, float]:
        """(LM cross-entropy sum, valid tokens) of a validation batch over all ranks."""
        lm, tokens = self.eval_cell(*self.inputs(batch))
        return float(lm.asnumpy()), float(tokens.asnumpy())

    def inputs(self, batch) -> Tuple[Tensor, ...]:
        return model_inputs(batch, self.attention)

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


def model_inputs(batch, attention: str) -> Tuple[Tensor, ...]:
    """(input_ids, labels, loss_mask, position_ids, doc) Tensors of a loader batch: doc is the
    attention_mask or actual_seq_len of the document-attention mode (a placeholder when "off", so
    every cell has one signature)."""
    arrays = model_arrays(batch, attention)
    position_ids = arrays.get("position_ids")
    if position_ids is None:
        position_ids = np.zeros((1,), np.int32)
    doc = arrays.get("attention_mask", arrays.get("actual_seq_len"))
    if doc is None:
        doc = np.zeros((1,), np.int32)
    return (Tensor(arrays["input_ids"]), Tensor(arrays["labels"]), Tensor(arrays["loss_mask"]),
            Tensor(position_ids), Tensor(doc))


def _add(acc, grad):
    return acc + grad


def _zero(acc):
    return ops.assign(acc, ops.zeros_like(acc))


def _square_sum(grad):
    squares = ops.square(grad)
    if grad.ndim > 1:
        # last axis first: MindSpore 2.9's CPU reduce of a whole matrix to a scalar is ~3x slower
        # than a row reduce followed by a reduce of the row sums (17 -> 6 ms per step on tiny)
        squares = ops.reduce_sum(squares, -1)
    return ops.reduce_sum(squares)


def _mul(factor, grad):
    return grad * factor
