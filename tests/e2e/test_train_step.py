"""The GRAPH-mode training step on the real (shrunken) MindFormers model: token-weighted
accumulation, the LR feed, clipping, loss scaling with non-finite skips, z-loss, and checkpoint
restore."""

import numpy as np
import pytest

from pretrain.config.errors import PretrainRunError
from pretrain.model import builder
from pretrain.train.metrics import MetricsWriter
from pretrain.resilience.identity import architecture
from pretrain.train.schedule import phase_lr
from tests.helpers.models import SHRINK

# one layer: every behaviour here is per step, not per layer, and each graph compiles faster
SHRINK = [*SHRINK, "model.num_layers=1"]
SEQ, VOCAB = 32, 512


@pytest.fixture(scope="module")
def runtime(mindformers_scratch):
    return mindformers_scratch

@pytest.fixture
def cfg(compose_many):
    return compose_many(SHRINK)


class RandomTokens:
    """Deterministic batches of the data loader's shape, a pure function of the step."""

    def __init__(self, rows, seed=0):
        self.rows, self.seed = rows, seed

    def batch(self, step):
        x = np.random.default_rng([self.seed, step]).integers(4, VOCAB, (self.rows, SEQ + 1)).astype(np.int32)
        return {
            "input_ids": x[:, :-1],
            "labels": x[:, 1:],
            "loss_mask": np.ones((self.rows, SEQ), np.float32),
        }


def make_step(cfg, weights=None, **kw):
    from pretrain.model.mindformers_config import document_attention
    from pretrain.train.step import TrainStep

    net = builder.build_model(cfg)
    if weights is not None:
        import mindspore as ms

        ms.load_param_into_net(net, {k: ms.Parameter(ms.Tensor(v), name=k) for k, v in weights.items()})
    args = dict(
        lr=1e-3,
        weight_decay=0.1,
        betas=(0.9, 0.95),
        eps=1e-8,
        grad_accum=1,
        grad_clip=1.0,
        loss_scaling=False,
        attention=document_attention(cfg),
    )
    args.update(kw)
    return TrainStep(net, **args)


def weights_of(step):
    return {p.name: p.asnumpy().copy() for p in step.net.trainable_params()}


def uneven(batch):
    """The batch with its first half nearly all padding (3 valid tokens a row) and its second half
    fully valid: micro-batch means would weigh those 6 tokens like the other 64."""
    out = {k: v.copy() for k, v in batch.items()}
    half = len(out["loss_mask"]) // 2
    out["loss_mask"][:half, 3:] = 0.0
    return out


def masked_mean_ce(step, batch):
    """The reference: the model's per-token cross entropy, averaged over the batch's valid tokens."""
    import mindspore as ms

    net = step.net
    net.set_train(False)  # logits
    try:
        logits = net(input_ids=ms.Tensor(batch["input_ids"]), labels=ms.Tensor(batch["labels"]),
                     loss_mask=ms.Tensor(batch["loss_mask"]), position_ids=ms.Tensor(
                         np.broadcast_to(np.arange(SEQ, dtype=np.int32), batch["labels"].shape).copy()),
                     attention_mask=ms.Tensor(np.broadcast_to(np.triu(np.ones((SEQ, SEQ), np.uint8), 1),
                                                              (len(batch["labels"]), 1, SEQ, SEQ)).copy()))
    finally:
        net.set_train(True)
    lg = logits.asnumpy().astype(np.float64)
    lse = np.log(np.exp(lg - lg.max(-1, keepdims=True)).sum(-1)) + lg.max(-1)
    ce = lse - lg[np.arange(len(lg)), batch["labels"].reshape(-1)]
    mask = batch["loss_mask"].reshape(-1)
    return float((ce * mask).sum() / mask.sum()), ce.reshape(batch["labels"].shape)


@pytest.mark.slow   # moved out of the default suite's 5 minutes (still run by CI)
def test_accumulating_uneven_micro_batches_equals_one_big_batch_token_weighted(runtime, cfg):
    b = uneven(RandomTokens(4).batch(0))
    halves = [{k: v[:2] for k, v in b.items()}, {k: v[2:] for k, v in b.items()}]
    accumulated = make_step(cfg, grad_accum=2)
    init = weights_of(accumulated)
    whole = make_step(cfg, weights=init)
    expected, ce = masked_mean_ce(whole, b)
    mean_of_means = np.mean([(ce[r] * b["loss_mask"][r]).sum() / b["loss_mask"][r].sum()
                             for r in (slice(0, 2), slice(2, 4))])
    assert abs(mean_of_means - expected) > 1e-3  # the batch is uneven enough to tell the two apart
    for i in range(2):  # the second step proves the buffers were zeroed after the first
        a, w = accumulated.step(halves, 1e-3), whole.step([b], 1e-3)
        assert a["tokens"] == w["tokens"] == 2 * 3 + 2 * SEQ
        if i == 0:
            assert w["loss"] == pytest.approx(expected, rel=1e-5)  # token-weighted, not per-batch means
        assert a["loss"] == pytest.approx(w["loss"], rel=1e-5)
        assert a["grad_norm"] == pytest.approx(w["grad_norm"], rel=1e-4)
    after_a, after_w = weights_of(accumulated), weights_of(whole)
    assert any(not np.allclose(after_a[k], init[k]) for k in init)
    for k in init:
        np.testing.assert_allclose(after_a[k], after_w[k], rtol=1e-4, atol=1e-5)  # Adam: ~1e-3 steps


@pytest.mark.slow   # two graph compiles: 10 s under load, to keep the default suite within 5 minutes
def test_the_lr_input_drives_the_update_without_recompiling(runtime, cfg):
    step = make_step(cfg)
    batch = [RandomTokens(2).batch(0)]
    before = weights_of(step)
    step.step(batch, 0.0)
    assert float(step.optimizer.learning_rate.asnumpy()) == 0.0
    assert all(np.array_equal(before[k], v) for k, v in weights_of(step).items())  # lr 0: AdamW moves nothing
    step.step(batch, 0.0123)
    assert float(step.optimizer.learning_rate.asnumpy()) == pytest.approx(0.0123)
    assert any(not np.array_equal(before[k], v) for k, v in weights_of(step).items())


# slow: each case compiles a graph (~3 s); the default suite keeps accumulation, the LR feed and overflow
@pytest.mark.slow
@pytest.mark.parametrize("clip", [1e-3, 1e3, 0.0])
def test_gradients_are_clipped_to_the_global_norm_and_not_at_all_with_clip_0(clip, runtime, cfg):
    step = make_step(cfg, grad_clip=clip)
    out = step.step([RandomTokens(2).batch(0)], 1e-3)
    # after the first step Adam's first moment is (1 - beta1) · the gradient it was given
    m = np.sqrt(sum(float((p.asnumpy() ** 2).sum()) for p in step.optimizer.moments1)) / (1 - 0.9)
    assert m == pytest.approx(min(out["grad_norm"], clip) if clip else out["grad_norm"], rel=1e-3)
    assert out["grad_norm"] > 1e-3


@pytest.mark.slow   # 3-5 s each; with the slow suite to keep the default one within 5 minutes (it took 396 s in CI)
def test_an_overflowing_step_is_skipped_and_the_loss_scale_backs_off(runtime, cfg):
    import mindspore as ms

    step = make_step(cfg, loss_scaling=True)
    batch = [RandomTokens(2).batch(0)]
    before = weights_of(step)
    step.scaler.scale_value.set_data(ms.Tensor(3e38, ms.float32))  # scaled gradients overflow fp32
    out = step.step(batch, 1e-3)
    assert out["finite"] is False and out["loss_scale"] == pytest.approx(3e38)
    assert all(np.array_equal(before[k], v) for k, v in weights_of(step).items())
    assert step.scaler_state()["scale_value"] == pytest.approx(1.5e38)
    step.load_scaler_state({"scale_value": 1024.0, "counter": 0})
    out = step.step(batch, 1e-3)
    assert out["finite"] is True and out["loss_scale"] == 1024.0
    assert any(not np.array_equal(before[k], v) for k, v in weights_of(step).items())


@pytest.mark.slow   # a graph compile of its own (~5 s); z-loss is off by default
def test_z_loss_adds_z_times_sum_log_partition_squared_to_mindformers_cross_entropy(runtime, cfg):
    from pretrain.train.step import LossCell, model_inputs

    net = builder.build_model(cfg)
    b = uneven(RandomTokens(2).batch(0))
    args = model_inputs(b, "mask")
    _, mindformers_ce, tokens = LossCell(net, attention="mask")(*args)
    z = 1e-2
    objective, ce, _ = LossCell(net, z_loss=z, attention="mask")(*args)  # the model in its logits mode
    logits = net(input_ids=args[0], labels=args[1], loss_mask=args[2], position_ids=args[3],
                 attention_mask=args[4]).asnumpy().astype(np.float64)
    log_z = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
    mask = b["loss_mask"].reshape(-1)
    assert float(tokens.asnumpy()) == mask.sum() == 3 + SEQ
    assert float(ce.asnumpy()) == pytest.approx(float(mindformers_ce.asnumpy()), rel=1e-5)
    assert float(objective.asnumpy()) - float(ce.asnumpy()) == pytest.approx(
        z * (log_z**2 * mask).sum(), rel=1e-4)


@pytest.mark.slow   # three graph compiles (~6 s); the default suite keeps the bitwise round trip in
# test_resilience_checkpoint.py
def test_restoring_a_checkpoint_continues_exactly_and_refuses_another_architecture(
    runtime, cfg, compose_many, tmp_path
):
    from pretrain.resilience.checkpoint import CheckpointManager
    from pretrain.train.trainer import PhaseInputs, Throughput, Trainer

    def trainer(config, checkpoints=None):
        return Trainer(
            make_step(config),
            metrics=MetricsWriter(tmp_path, enabled=False),
            grad_accum=1,
            arch=architecture(config),
            checkpoints=checkpoints,
            throughput=Throughput(tokens_per_step=2 * SEQ, devices=1, flops_per_token=1.0, peak_flops=1.0),
        )

    lr = phase_lr("general", 6, cfg.phase.general.lr, start=0.0)
    plan = PhaseInputs("general", lr, RandomTokens(2), None)
    checkpoints = CheckpointManager(tmp_path / "checkpoints", keep_latest=2)
    first = trainer(cfg, checkpoints)
    first.state.phase = "general"
    for _ in range(3):
        first.train_step(plan)
    first.save()
    reference = [first.train_step(plan)["loss"] for _ in range(3)]

    resumed = trainer(cfg)
    resumed.restore(checkpoints, checkpoints.latest())
    assert (resumed.state.global_step, resumed.state.phase_step) == (3, 3)
    assert resumed.state.lr == pytest.approx(lr.at(2))
    assert [resumed.train_step(plan)["loss"] for _ in range(3)] == pytest.approx(reference, rel=1e-6)

    other = compose_many(SHRINK + ["model.ffn_hidden_size=96"])
    with pytest.raises(
        PretrainRunError, match=r"model\.ffn_hidden_size=128 there, model\.ffn_hidden_size=96 in this run"
    ):
        trainer(other).restore(checkpoints, checkpoints.latest())
