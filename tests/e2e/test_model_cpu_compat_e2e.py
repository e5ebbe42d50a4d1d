"""The CPU replacements: refused on a foreign mindformers, applied only on CPU, and numerically the
attention / embedding MindFormers' Ascend kernels compute."""

import sys
import types

import numpy as np
import pytest
from pretrain.model import builder, cpu_compat


@pytest.fixture(scope="module")
def cpu_runtime(mindformers_scratch, compose_many):
    builder.init_runtime(compose_many([]))
    return cpu_compat._replacements()


def test_replacements_are_installed_once_and_only_for_cpu(cpu_runtime, compose_many, monkeypatch):
    from mindformers.parallel_core.training_graph.base_models.gpt import gpt_layer_specs
    from mindformers.parallel_core.training_graph.transformer import norm

    from mindformers.parallel_core.training_graph.base_models.gpt import moe_module_specs
    from mindformers.parallel_core.training_graph.transformer.moe import router

    assert gpt_layer_specs.FlashAttention.__name__ == "CPUCoreAttention"
    assert norm.FusedRMSNorm is norm.RMSNorm
    assert router.TopkExt.__name__ == "CPUTopk" and moe_module_specs.FFNGroupedGEMM.__name__ == "CPUDenseExperts"
    before = gpt_layer_specs.FlashAttention
    cpu_compat.apply()
    assert gpt_layer_specs.FlashAttention is before  # idempotent: no second layer of patches

    context_module = sys.modules["mindformers.core.context.build_context"]
    monkeypatch.setattr(context_module, "build_context", lambda config: None)
    monkeypatch.setattr(cpu_compat, "apply", lambda: pytest.fail("CPU replacements applied for Ascend"))
    builder.init_runtime(compose_many(["model=llama3_8b", "hardware=ascend910b_1x8", "parallel=dp8"]))


def _reference_gqa(q, k, v, mask, scale):
    """softmax(QKᵀ·scale)V per batch and head, query head h reading kv head h // rep (numpy)."""
    s, b, n, d = q.shape
    rep = n // k.shape[2]
    out = np.zeros((s, b, n, d), np.float64)
    for bi in range(b):
        for h in range(n):
            scores = q[:, bi, h] @ k[:, bi, h // rep].T * scale
            scores = np.where(mask[bi, 0] > 0, -np.inf, scores)
            p = np.exp(scores - scores.max(-1, keepdims=True))
            out[:, bi, h] = (p / p.sum(-1, keepdims=True)) @ v[:, bi, h // rep]
    return out.reshape(s, b, n * d)


def test_grouped_query_attention_matches_the_reference(cpu_runtime):
    from mindspore import Tensor

    rng = np.random.default_rng(0)
    s, b, n, kv, d = 6, 2, 4, 2, 8
    q = rng.standard_normal((s, b, n, d)).astype(np.float32)
    k = rng.standard_normal((s, b, kv, d)).astype(np.float32)
    v = rng.standard_normal((s, b, kv, d)).astype(np.float32)
    mask = np.broadcast_to(np.triu(np.ones((s, s), np.float32), 1), (b, 1, s, s)).copy()
    mask[1, 0, :, 0] = 1.0  # batch row 1: its first key is padding, masked for every query
    mask[1, 0, 0, 0] = 0.0  # (except itself, so no row is all masked)

    repeat = cpu_runtime["repeat_kv_sbnd"]
    attention = cpu_runtime["CPUCoreAttention"](types.SimpleNamespace(softmax_scale=None, kv_channels=d))
    got = attention(
        Tensor(q), repeat(None, Tensor(k), n // kv), repeat(None, Tensor(v), n // kv), Tensor(mask)
    )
    np.testing.assert_allclose(got.asnumpy(), _reference_gqa(q, k, v, mask, d**-0.5), rtol=1e-4, atol=1e-5)


def test_embedding_lookup_is_a_row_gather(cpu_runtime):
    from mindspore import Tensor

    rng = np.random.default_rng(1)
    table = rng.standard_normal((11, 5)).astype(np.float32)
    ids = rng.integers(0, 11, (3, 4)).astype(np.int32)
    got = cpu_runtime["gather_embedding"](None, Tensor(ids), Tensor(table))
    np.testing.assert_array_equal(got.asnumpy(), table[ids])


def test_the_quiet_import_moves_only_mindformers_console_handler(mindformers_scratch):
    """A handler someone else put on MindFormers' logger (pytest 9 adds its log capture there) keeps its
    stream; MindFormers' own console handler goes to the real stdout at ERROR."""
    import io
    import logging

    from mindformers.tools.logger import LimitedRepeatHandler, get_logger

    foreign = logging.StreamHandler(io.StringIO())
    get_logger().addHandler(foreign)
    try:
        builder.import_mindformers_quietly()
        assert isinstance(foreign.stream, io.StringIO)
        console = [h for h in get_logger().handlers if isinstance(h, LimitedRepeatHandler)]
        assert console and all(h.stream is sys.__stdout__ and h.level == logging.ERROR for h in console)
    finally:
        get_logger().removeHandler(foreign)
