"""Pangu Ultra's depth-scaled sandwich norm (pretrain/model/sandwich.py) on MindFormers' Mcore graph:
one layer's forward against a NumPy reference, every weight's initial std against the paper's
formulas, the planner's parameter count, and the exported yaml building the same network."""

import math

import numpy as np
import pytest

from pretrain.model import builder
from pretrain.model import mindformers_config as mfc
from pretrain.model import sandwich
from pretrain.plan.planner import model_shape, param_count
from tests.helpers.mindformers_load import load_as_mindformers_does
from tests.helpers.models import SHRINK

LAYERS = 4
PANGU = ["model=pangu_ultra_135b", *SHRINK, "model.head_dim=16", f"model.num_layers={LAYERS}"]


@pytest.fixture(scope="module")
def pangu(mindformers_scratch, compose_many):
    import mindspore as ms

    ms.set_seed(0)
    cfg = compose_many(PANGU)
    return cfg, builder.build_model(cfg)


def rms_norm(x, weight, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def reference_layer(layer, x, mask, cfg):
    """DSSN as Pangu Ultra §2.2 writes it, in NumPy, from the layer's own weights:
    h' = h + PostNorm(Attn(InNorm(h))), out = h' + PostNorm(MLP(PreNorm(h'))). x: [S, B, H]."""
    w = {p.name.split(".", 3)[-1]: p.asnumpy().astype(np.float64) for p in layer.get_parameters()}
    m, eps = cfg.model, float(cfg.model.norm_eps)
    heads, kv, hd = int(m.num_heads), int(m.num_kv_heads), int(m.head_dim)
    rep = heads // kv
    seq, batch, _ = x.shape

    # attention: MindFormers' interleaved qkv rows, per kv group [q (rep heads), k, v]
    qkv = rms_norm(x, w["input_layernorm.weight"], eps) @ w["self_attention.linear_qkv.weight"].T
    qkv = qkv.reshape(seq, batch, kv, (rep + 2) * hd)
    q = qkv[..., : rep * hd].reshape(seq, batch, heads, hd)
    k = qkv[..., rep * hd: (rep + 1) * hd]
    v = qkv[..., (rep + 1) * hd:]
    k, v = np.repeat(k, rep, axis=2), np.repeat(v, rep, axis=2)   # query head i reads kv head i // rep
    scores = np.einsum("sbnd,tbnd->bnst", q, k) / math.sqrt(hd) + mask * -1e9
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    attn = np.einsum("bnst,tbnd->sbnd", probs, v).reshape(seq, batch, heads * hd)
    attn = attn @ w["self_attention.linear_proj.weight"].T
    h = x + rms_norm(attn, w["post_self_attn_layernorm.weight"], eps)

    # SwiGLU MLP; MindFormers' interleaved fc1 rows alternate gate, up
    up = rms_norm(h, w["pre_mlp_layernorm.weight"], eps) @ w["mlp.linear_fc1.weight"].T
    if type(layer.mlp).__name__ == "MLPInterleaved":
        gate, up = up[..., 0::2], up[..., 1::2]
    else:
        gate, up = np.split(up, 2, axis=-1)
    mlp = (gate / (1 + np.exp(-gate)) * up) @ w["mlp.linear_fc2.weight"].T
    return h + rms_norm(mlp, w["post_mlp_layernorm.weight"], eps)


def test_one_sandwich_layer_equals_the_numpy_reference(pangu):
    import mindspore as ms

    cfg, net = pangu
    layer = net.model.decoder.layers[1]
    assert type(layer).__name__ == "SandwichTransformerLayer"
    # the post-norms' scales are away from 1, so a layer that skipped them could not match
    rng = np.random.default_rng(0)
    seq, batch = 8, 2
    x = rng.standard_normal((seq, batch, int(cfg.model.hidden_size))).astype(np.float32)
    causal = np.triu(np.ones((seq, seq), np.float32), 1)
    mask = np.broadcast_to(causal, (batch, 1, seq, seq)).copy()
    norms = [p for p in layer.get_parameters() if "layernorm" in p.name]
    initial = [p.asnumpy().copy() for p in norms]
    try:   # trained-looking norm scales: a norm applied in the wrong place shows in the output
        for p in norms:
            p.set_data(ms.Tensor(p.asnumpy() * rng.uniform(0.5, 1.5, p.shape).astype(np.float32)))
        out = layer(ms.Tensor(x), attention_mask=ms.Tensor(mask.astype(np.uint8)))[0].asnumpy()
        ref = reference_layer(layer, x.astype(np.float64), mask, cfg)
    finally:   # the module's other tests read the initial weights
        for p, value in zip(norms, initial):
            p.set_data(ms.Tensor(value))
    np.testing.assert_allclose(out, ref, atol=1e-5, rtol=0)


def test_initial_weights_follow_tinyinit_and_depth_scaled_norm_scales(pangu):
    cfg, net = pangu
    d = int(cfg.model.hidden_size)
    tiny = math.sqrt(1 / (2 * d * LAYERS))    # TinyInit, Pangu Ultra §2.3
    gamma_attn, gamma_mlp = 0.283 / math.sqrt(LAYERS), 0.432 / math.sqrt(LAYERS)   # DSSN, §2.2
    assert sandwich.post_norm_scales(LAYERS) == pytest.approx((gamma_attn, gamma_mlp))
    seen = set()
    for p in net.trainable_params():
        value, kind = p.asnumpy(), p.name.rsplit(".", 2)[-2]
        seen.add(kind)
        if value.ndim == 2:   # embedding, qkv, proj, fc1, fc2, head: one std, no 1/sqrt(2L) on projections
            assert abs(value.mean()) < 0.1 * tiny and value.std() == pytest.approx(tiny, rel=0.1), p.name
        elif kind == "post_self_attn_layernorm":
            np.testing.assert_allclose(value, gamma_attn, rtol=1e-6, err_msg=p.name)
        elif kind == "post_mlp_layernorm":
            np.testing.assert_allclose(value, gamma_mlp, rtol=1e-6, err_msg=p.name)
        else:   # the pre-norms and the final norm start at 1
            assert kind in ("input_layernorm", "pre_mlp_layernorm", "final_layernorm"), p.name
            np.testing.assert_array_equal(value, 1.0)
    assert {"post_self_attn_layernorm", "post_mlp_layernorm", "linear_qkv", "linear_fc2"} <= seen


def test_the_exported_yaml_builds_the_same_dssn_model_with_the_planners_count(pangu, tmp_path):
    from mindformers.models.build_model import build_network
    from mindformers.tools.register import MindFormerConfig

    cfg, net = pangu
    names = {p.name: tuple(p.shape) for p in net.trainable_params()}
    assert sum(int(np.prod(s)) for s in names.values()) == param_count(model_shape(cfg.model)).total
    assert sum("post_mlp_layernorm" in n for n in names) == LAYERS
    exported = mfc.export(cfg, first_phase=cfg.phase.general, first_phase_steps=10, first_phase_peak=1e-3)
    assert exported["model"]["model_config"]["architectures"] == ["PanguUltraForCausalLM"]
    path = tmp_path / "mindformers.yaml"
    path.write_text(mfc.to_yaml(exported))
    from_yaml = build_network(MindFormerConfig(str(path)).model)   # MindFormers' own builder
    assert type(from_yaml).__name__ == "TrainingPanguUltraForCausalLM"
    assert {p.name: tuple(p.shape) for p in from_yaml.trainable_params()} == names


@pytest.mark.parametrize("sequence_parallel", [True, False], ids=["sp", "no-sp"])
def test_dssn_yaml_passes_mindformers_checks_on_1024_devices_and_post_norms_split_like_the_residual(
    sequence_parallel, mindformers, compose_many, tmp_path, monkeypatch
):
    """Pangu's layout of sweeps/pangu_ultra_135b_1024.yaml (dp8 tp8 pp16), narrowed to 16 layers of
    width 64: MindFormers' own checks accept the yaml, and under the semi-auto context it sets, every
    DSSN post-norm is split as the layer's input norm (the residual stream's [S, B, H] split: over
    cp·tp along the sequence with sequence parallel, else over cp, 1 here). Attention and MLP are left
    out of the layer: their tensor-parallel linears need initialised communication groups."""
    import dataclasses

    import mindspore as ms
    from mindformers.parallel_core.training_graph.base_models.gpt.gpt_layer_specs import (
        get_gpt_layer_local_spec)
    from mindformers.parallel_core.training_graph.device_matrix import layout
    from mindformers.parallel_core.training_graph.transformer.identity_op import IdentityOp
    from mindformers.parallel_core.utils.spec_utils import build_module
    from mindformers.tools import check_rules

    cfg = compose_many([
        "model=pangu_ultra_135b", "hardware=ascend910b_128x8", "parallel=dp8tp8pp16", "parallel.vpp=1",
        f"parallel.sequence_parallel={str(sequence_parallel).lower()}", "model.hidden_size=64",
        "model.num_heads=8", "model.num_kv_heads=8", "model.head_dim=8", "model.ffn_hidden_size=128",
        "model.num_layers=16", "model.vocab_size=512", "model.seq_length=64",
        "model.max_position_embeddings=64",
    ])
    sandwich.register()
    path = tmp_path / "mindformers.yaml"
    path.write_text(mfc.to_yaml(mfc.export(cfg, first_phase=cfg.phase.general, first_phase_steps=10,
                                           first_phase_peak=1e-3)))
    monkeypatch.setattr(check_rules, "get_real_group_size", lambda: 1024)
    try:
        config, t, _ = load_as_mindformers_does(path, 1024)
        check_rules._check_parallel(config)
        check_rules._check_config_campacity(config)
        assert ms.get_auto_parallel_context("parallel_mode") == "semi_auto_parallel"
        assert (t.tensor_model_parallel_size, t.sequence_parallel) == (8, sequence_parallel)
        base = get_gpt_layer_local_spec()
        base.submodules = dataclasses.replace(base.submodules, self_attention=IdentityOp, mlp=IdentityOp)
        layout.init_layout(t)
        layer = build_module(sandwich.sandwich_spec(base, (0.1, 0.2)), config=t, layer_number=1)
    finally:
        ms.reset_auto_parallel_context()
    # (fused RmsNorm, or on CPU after cpu_compat the plain RMSNorm: whichever the norm spec builds)
    split = strategies(layer.input_layernorm)
    assert split and all(split.values())
    for norm in (layer.post_self_attn_layernorm, layer.post_mlp_layernorm):
        assert strategies(norm) == split


def strategies(cell):
    """The shard strategy (or layout) of every primitive of a cell, by attribute name."""
    return {name: prim.attrs.get("in_layout", prim.attrs.get("in_strategy"))
            for name, prim in vars(cell)["_primitives"].items() if prim is not None and name != "cast"}


# Pangu Ultra shrunk to 8 layers of width 64 (0.8M parameters) on the sample corpus: DSSN + TinyInit
PANGU_RUN = ["model=pangu_ultra_135b", "model.hidden_size=64", "model.num_layers=8", "model.num_heads=4",
             "model.num_kv_heads=2", "model.ffn_hidden_size=128", "model.seq_length=64",
             "model.max_position_embeddings=64", "model.vocab_size=4096", "model.global_batch_size=8",
             "model.lr_peak=1e-3", "train.eval_every=0", "phase=general",
             "train.total_tokens=74240"]   # general: 0.7 x 74240 / (8 x 64) = 102 steps


@pytest.mark.slow
def test_shrunken_pangu_with_dssn_and_tinyinit_trains_100_steps_on_cpu(data_cache, tmp_path):
    import json

    from pretrain.train.metrics import read_metrics
    from tests.helpers import cli

    cli.run(*PANGU_RUN, "run_dir=run", cwd=tmp_path, cache=data_cache, timeout=900, check=True)
    run = tmp_path / "run"
    exported = (run / "mindformers_general.yaml").read_text()
    assert "PanguUltraForCausalLM" in exported and "sandwich_norm: true" in exported
    train = [r for r in read_metrics(run / "metrics.jsonl") if r["kind"] == "train"]
    assert len(train) >= 100 and all(math.isfinite(r["loss"]) and r["grad_norm"] > 0 for r in train)
    first, last = (np.mean([r["loss"] for r in rows]) for rows in (train[:10], train[-10:]))
    assert first > 8.0 and last < first - 1.0, (first, last)   # ~8.2 -> ~6.4 measured
    (phase,) = json.loads((run / "summary.json").read_text())["phases"]
    assert phase["loss_end_mean"] < phase["loss_start_mean"]
