"""MindFormers' Mcore MoE layers on CPU (pretrain/model/cpu_compat.py, items 7-8): one MoE layer
against a NumPy top-k reference (outputs and load-balancing loss), the balance loss in the training
objective, the planner's parameter count; slow: a shrunken Qwen3-30B-A3B trains 100+ steps with its
expert load in the metrics, and two data-parallel processes equal one."""

import json
import math

import numpy as np
import pytest

from pretrain.model import builder, moe_load
from pretrain.model import mindformers_config as mfc
from pretrain.plan.planner import model_shape, param_count
from tests.helpers import cli
from tests.helpers.models import SHRINK
from tests.helpers.net import free_port

EXPERTS, TOP_K, MOE_FFN = 4, 2, 32
MOE = ["model=qwen3_30b_a3b", *SHRINK, "model.head_dim=16", f"model.num_experts={EXPERTS}",
       f"model.num_experts_per_token={TOP_K}", f"model.moe_ffn_hidden_size={MOE_FFN}"]


@pytest.fixture(scope="module")
def moe(mindformers_scratch, compose_many):
    import mindspore as ms

    ms.set_seed(0)
    cfg = compose_many(MOE)
    return cfg, builder.build_model(cfg)


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def reference_moe(layer, x):
    """Qwen3-MoE routing in NumPy: softmax router, top-k, renormalised gates (norm_topk_prob), SwiGLU
    experts (fc1's first half the gate); balance loss coeff·E·Σ_e P_e·f_e (P_e mean router
    probability, f_e the share of the T·k routing slots expert e got). x: [S, B, h]."""
    w = {p.name.rsplit(".", 2)[-2] + "." + p.name.rsplit(".", 1)[-1]: p.asnumpy().astype(np.float64)
         for p in layer.get_parameters()}
    tokens = x.reshape(-1, x.shape[-1])
    hidden = tokens.shape[1]
    probs = softmax(tokens @ w["router.weight"].T)                              # [T, E]
    top = np.argsort(-probs, axis=-1, kind="stable")[:, :TOP_K]                  # [T, k]
    gates = np.take_along_axis(probs, top, -1)
    gates /= gates.sum(-1, keepdims=True)
    w1 = w["experts.weight1"].reshape(EXPERTS, hidden, 2 * MOE_FFN)
    w2 = w["experts.weight2"].reshape(EXPERTS, MOE_FFN, hidden)
    out = np.zeros_like(tokens)
    for slot in range(TOP_K):
        for e in range(EXPERTS):
            rows = top[:, slot] == e
            fc1 = tokens[rows] @ w1[e]
            gate, up = fc1[:, :MOE_FFN], fc1[:, MOE_FFN:]
            out[rows] += gates[rows, slot, None] * ((gate / (1 + np.exp(-gate)) * up) @ w2[e])
    share = np.bincount(top.reshape(-1), minlength=EXPERTS) / top.size
    aux = mfc.MOE_AUX_LOSS_COEFF * EXPERTS * float((probs.mean(0) * share).sum())
    return out.reshape(x.shape), aux, np.bincount(top.reshape(-1), minlength=EXPERTS)


def test_one_moe_layer_on_cpu_equals_the_numpy_top_k_reference(moe):
    import mindspore as ms

    cfg, net = moe
    layer = net.model.decoder.layers[1].mlp
    assert type(layer).__name__ == "MoELayer" and type(layer.experts).__name__ == "CPUDenseExperts"
    rng = np.random.default_rng(0)
    seq, batch = int(cfg.model.seq_length), 2
    x = rng.standard_normal((seq, batch, int(cfg.model.hidden_size))).astype(np.float32)
    for p in layer.get_parameters():   # larger router logits: a decisive, uneven top-k
        if p.name.endswith("router.weight"):
            p.set_data(ms.Tensor(p.asnumpy() * 50))
    layer.experts.expert_tokens.copy_(ms.Tensor(np.zeros(EXPERTS, np.float32)))
    out, _, aux = layer(ms.Tensor(x))
    ref, ref_aux, counts = reference_moe(layer, x.astype(np.float64))
    np.testing.assert_allclose(out.asnumpy(), ref, atol=1e-5, rtol=0)
    assert float(aux.asnumpy()) == pytest.approx(ref_aux, rel=1e-5) and ref_aux > 0
    np.testing.assert_array_equal(layer.experts.expert_tokens.asnumpy(), counts)   # the step's load
    assert counts.sum() == seq * batch * TOP_K and counts.max() > counts.mean()


@pytest.mark.slow   # ~10 s: it compiles the whole model's forward
def test_balance_loss_is_in_the_objective_and_the_count_is_the_planners(moe):
    import mindspore as ms

    from pretrain.train.step import LossCell

    cfg, net = moe
    assert sum(int(p.size) for p in net.trainable_params()) == param_count(model_shape(cfg.model)).total
    assert mfc.model_config(cfg)["moe_aux_loss_coeff"] == mfc.MOE_AUX_LOSS_COEFF
    routers = [c for _, c in net.cells_and_names() if type(c).__name__ == "TopKRouter"]
    assert routers and all(r.moe_aux_loss_coeff == mfc.MOE_AUX_LOSS_COEFF and r.dp == 1 for r in routers)
    from pretrain.data.loader import rows_to_batch
    from pretrain.train.step import model_inputs

    rng = np.random.default_rng(1)
    seq = int(cfg.model.seq_length)
    rows = [(rng.integers(4, int(cfg.model.vocab_size), seq + 1).astype(np.int32),
             np.array([seq + 1], np.int32)) for _ in range(2)]
    attention = mfc.document_attention(cfg)
    inputs = model_inputs(rows_to_batch(rows, seq), attention)
    objective, lm, tokens = LossCell(net, attention=attention)(*inputs)
    # the objective is the LM sum plus the balance loss, which the model scales by the token count
    balance = (float(objective.asnumpy()) - float(lm.asnumpy())) / float(tokens.asnumpy())
    layers = int(cfg.model.num_layers)
    assert 0 < balance < layers * mfc.MOE_AUX_LOSS_COEFF * EXPERTS   # coeff·E·Σ P·f ≤ coeff·E per layer
    load = moe_load.ExpertLoad(net)
    rows = load.tokens_per_expert()
    assert len(rows) == layers and all(sum(r) > 0 for r in rows)
    metrics = load.metrics()
    assert metrics["expert_load_max_over_mean"] >= 1.0 and metrics["expert_tokens_dropped"] == 0.0


# Qwen3-30B-A3B shrunk to 2 layers of width 64 with 4 experts (2 active) on the sample corpus
MOE_RUN = ["model=qwen3_30b_a3b", "model.hidden_size=64", "model.num_layers=2", "model.num_heads=4",
           "model.num_kv_heads=2", "model.head_dim=16", "model.ffn_hidden_size=128",
           f"model.num_experts={EXPERTS}", f"model.num_experts_per_token={TOP_K}",
           f"model.moe_ffn_hidden_size={MOE_FFN}", "model.seq_length=64", "model.max_position_embeddings=64",
           "model.vocab_size=4096", "model.global_batch_size=8", "model.lr_peak=1e-3", "train.eval_every=0",
           "phase=general", "parallel.micro_batch_size=4"]


def run_pretrain(cache, cwd, *args):
    cli.run(*MOE_RUN, *args, cwd=cwd, cache=cache, timeout=900, check=True)
    from pretrain.train.metrics import read_metrics

    return [r for r in read_metrics(cwd / "run" / "metrics.jsonl") if r["kind"] == "train"]


@pytest.mark.slow
def test_shrunken_qwen3_moe_trains_100_steps_on_cpu_with_expert_load_in_the_metrics(data_cache, tmp_path):
    # general: 0.7 x 74240 / (8 x 64) = 102 steps, two micro-batches of 4 rows each
    train = run_pretrain(data_cache, tmp_path, "train.total_tokens=74240", "run_dir=run")
    assert len(train) >= 100 and all(math.isfinite(r["loss"]) for r in train)
    first, last = (np.mean([r["loss"] for r in rows]) for rows in (train[:10], train[-10:]))
    assert first > 8.0 and last < first - 1.0, (first, last)
    assert all(r["expert_load_max_over_mean"] >= 1.0 and r["expert_tokens_dropped"] == 0 for r in train)
    exported = (tmp_path / "run" / "mindformers_general.yaml").read_text()
    assert "Qwen3MoeForCausalLM" in exported and "moe_aux_loss_coeff: 0.001" in exported


@pytest.mark.slow
def test_moe_dp2_over_msrun_equals_one_process(data_cache, tmp_path):
    """Rank r's micro-batch of 4 rows is the one process's micro-batch r (grad_accum 2), so the balance
    loss is computed over the same tokens on both sides (moe_load.localize_routers)."""
    steps = ["train.total_tokens=10240"]   # 14 steps
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    one = run_pretrain(data_cache, tmp_path / "one", *steps, "run_dir=run")
    two = run_pretrain(data_cache, tmp_path / "two", *steps, "run_dir=run", "parallel=dp2",
                       "hardware=cpu_2proc", f"hardware.master_port={free_port()}")
    assert len(one) == len(two) == 14
    np.testing.assert_allclose([r["loss"] for r in two], [r["loss"] for r in one], rtol=1e-5)
    np.testing.assert_allclose([r["grad_norm"] for r in two], [r["grad_norm"] for r in one], rtol=1e-4)
    # the expert load is the whole global batch's on both sides (summed over the ranks)
    np.testing.assert_allclose([r["expert_load_max_over_mean"] for r in two],
                               [r["expert_load_max_over_mean"] for r in one], rtol=1e-5)
    assert json.loads((tmp_path / "two" / "run" / "summary.json").read_text())["phases"]
