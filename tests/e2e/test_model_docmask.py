"""Packed documents train as separate documents on the real (shrunken) MindFormers Mcore model:
a row [doc A | doc B | pad] gives B the losses B has alone at the start of a row, and A's losses do
not depend on B; with data.document_mask=false the same comparison sees B read A."""

import numpy as np
import pytest

from pretrain.data.loader import rows_to_batch
from pretrain.model import builder
from pretrain.model.mindformers_config import document_attention
from pretrain.train.step import model_inputs
from tests.helpers.models import SHRINK

pytestmark = pytest.mark.slow   # two model graphs compile (~15 s each on 2 loaded cores)

SEQ, PAD, EOD = 32, 0, 2
# fp32 with masked keys at -1e9 (weight exactly 0): B's losses match B alone up to summation order
TOL = 1e-5


def doc(seed, n):
    """n tokens ending with EOD, as packing lays a document out."""
    return np.append(np.random.default_rng(seed).integers(4, 512, n - 1), EOD).astype(np.int32)


def row(*docs):
    ids = np.full(SEQ + 1, PAD, np.int32)
    lens = np.array([len(d) for d in docs], np.int32)
    ids[: lens.sum()] = np.concatenate(docs)
    return ids, lens


@pytest.fixture(scope="module")
def models(mindformers_scratch, compose_many):
    """{document_mask: (net, mode)} with the same weights."""
    import mindspore as ms

    out = {}
    weights = None
    for on in (True, False):
        cfg = compose_many([*SHRINK, f"data.document_mask={str(on).lower()}"])
        ms.set_seed(0)
        net = builder.build_model(cfg)
        if weights is None:
            weights = {p.name: p.asnumpy().copy() for p in net.trainable_params()}
        else:
            ms.load_param_into_net(net, {k: ms.Parameter(ms.Tensor(v), name=k) for k, v in weights.items()})
        net.set_train(False)  # fp32 logits [B·S, V]
        out[on] = (net, document_attention(cfg))
    return out


def token_losses(model, batch):
    """Per-token cross entropy [B, S] of the model's logits for a loader batch."""
    net, mode = model
    x, y, mask, pos, dm = model_inputs(batch, mode)
    kwargs = dict(input_ids=x, labels=y, loss_mask=mask)
    if mode == "mask":
        kwargs.update(position_ids=pos, attention_mask=dm)
    logits = net(**kwargs).asnumpy().astype(np.float64)
    lse = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
    ce = lse - logits[np.arange(len(logits)), batch["labels"].reshape(-1)]
    return ce.reshape(batch["labels"].shape)


def test_document_b_in_a_packed_row_has_the_losses_it_has_alone(models):
    a, b, b2 = doc(1, 12), doc(2, 10), doc(3, 9)
    batch = rows_to_batch([row(a, b), row(b), row(a, b2)], SEQ)
    assert batch["loss_mask"][0, 11] == 0  # A's EOD -> B's first token is not a target
    in_a = slice(0, 11)                     # A's targets (its last input is EOD)
    b_in_row, b_alone = slice(12, 12 + 9), slice(0, 9)

    on = token_losses(models[True], batch)
    np.testing.assert_allclose(on[0, b_in_row], on[1, b_alone], rtol=0, atol=TOL)
    np.testing.assert_allclose(on[0, in_a], on[2, in_a], rtol=0, atol=TOL)  # B -> B2: A unchanged
    assert np.abs(on[0, b_in_row] - on[1, b_alone]).max() < TOL

    off = token_losses(models[False], batch)
    assert np.abs(off[0, b_in_row] - off[1, b_alone]).max() > 100 * TOL, "without the mask B reads A"
    np.testing.assert_allclose(off[0, in_a], on[0, in_a], rtol=0, atol=TOL)  # causal: A never saw B


def test_position_ids_reach_rope_when_masking(models):
    a, b = doc(1, 12), doc(2, 10)
    batch = rows_to_batch([row(a, b)], SEQ)
    shifted = dict(batch, position_ids=np.zeros_like(batch["position_ids"]))
    on = models[True]
    assert np.abs(token_losses(on, batch) - token_losses(on, shifted)).max() > 100 * TOL
