"""Planner: the formulas' reference values, published cross-checks, monotonic properties, every conf option.

Pure and fast (no mindspore): configs come from the real conf/ through compose(), like the CLI.
"""
import functools
import json
from types import SimpleNamespace

import pytest

from pretrain.config.compose import compose
from pretrain.config.resolved import ResolvedRun
from pretrain.plan import planner
from pretrain.plan.formulas import (ModelShape, activation_bytes_per_layer, checkpoint_overhead, model_states,
                                    optimal_checkpoint_interval)
from pretrain.plan.planner import bubble_fraction, flops_per_token, model_shape, param_count

L70 = ["model=llama3_70b", "parallel=dp8tp4pp2", "hardware=ascend910b_8x8"]


@functools.lru_cache(maxsize=None)
def _cfg(*overrides):
    return compose(list(overrides))


def plan_of(*overrides):
    return planner.plan(ResolvedRun.of(_cfg(*overrides)))


def shape_of(model):
    return model_shape(_cfg(f"model={model}").model)


def states_gb(stage):
    return stage.weights_gb + stage.grads_gb + stage.optimizer_gb


# ------------------------------------------------------------------ the formulas' reference values

def test_llama3_param_counts_match_design_f1():
    p70, p8 = param_count(shape_of("llama3_70b")), param_count(shape_of("llama3_8b"))
    assert p70.total == 70_553_706_496
    assert p8.total == 8_030_261_248
    assert p70.active == p70.total and p8.active == p8.total     # dense


def test_70b_flops_per_token_and_nvidia_throughput_check():
    f2 = flops_per_token(shape_of("llama3_70b"))                 # model seq 8192
    assert f2 == pytest.approx(481.4e9, rel=1e-3)
    assert 1533 * f2 == pytest.approx(738e12, rel=2e-3)          # NVIDIA's published 70B run
    assert flops_per_token(shape_of("llama3_70b"), seq=4096) < f2  # the attention term scales with s


def test_tied_head_still_costs_flops_but_no_params():
    untied = shape_of("llama3_8b")
    tied = ModelShape(**{**untied.__dict__, "tie_embeddings": True})
    assert param_count(untied).total - param_count(tied).total == untied.vocab * untied.hidden
    assert flops_per_token(tied) == flops_per_token(untied)


def test_bubble_fractions_f5():
    assert bubble_fraction(8, 16) == pytest.approx(7 / 23)
    assert bubble_fraction(8, 16) == pytest.approx(0.3045, abs=5e-4)   # Pangu Ultra reports 30.45%
    assert bubble_fraction(8, 16, vpp=2) == pytest.approx(7 / 39)
    # zero_bubble is MindSpore's ZB-V: no bubble once m >= 2p micro-batches fill the V
    assert bubble_fraction(8, 16, vpp=2, schedule="zero_bubble") == 0.0
    assert bubble_fraction(8, 4, vpp=2, schedule="zero_bubble") == pytest.approx(7 / 15)
    assert bubble_fraction(1, 16) == 0.0
    assert bubble_fraction(8, 0) == bubble_fraction(8, 1)               # guarded, not a crash


def test_70b_model_states_design_f3():
    z1 = plan_of(*L70)
    assert z1.layout.zero_stage == 1 and z1.layout.grad_fp32
    assert round(z1.memory_first.params / 1e9, 2) == 8.82                # Φ
    assert round(states_gb(z1.memory_first), 1) == 66.1
    z3 = plan_of(*L70, "parallel.zero_stage=3")
    assert round(states_gb(z3.memory_first), 1) == 19.8
    assert round(z1.naive_states_gb, 1) == 15.4                          # 70.55e9 * 14 B / 64


def test_naive_figure_is_flagged_when_the_real_peak_does_not_fit():
    p = plan_of(*L70)
    assert not p.fits and p.naive_states_gb < p.capacity_gb < p.peak_gb
    assert "ignores gradients, activations and logits" in p.naive_note
    assert any("fully sharded states figure" in w for w in p.warnings)


# ------------------------------------------------------------------ published cross-checks

def test_qwen3_30b_a3b_total_and_active():
    # Qwen3 Technical Report (arXiv 2505.09388), Table 2: 30.5B total, 3.3B activated.
    pc = param_count(shape_of("qwen3_30b_a3b"))
    assert pc.total == pytest.approx(30.5e9, rel=5e-3)
    assert pc.active == pytest.approx(3.3e9, rel=2.5e-2)


def test_qwen3_8b_total_and_non_embedding():
    # Qwen3-8B model card: 8.2B parameters, 6.95B non-embedding (QK-norm, head_dim 128, untied).
    pc = param_count(shape_of("qwen3_8b"))
    assert round(pc.total / 1e9, 1) == 8.2
    assert round((pc.total - pc.embedding - pc.head) / 1e9, 2) == 6.95


def test_pangu_ultra_is_135b():
    # Pangu Ultra (arXiv 2504.07866): "135B parameters", 94 layers, sandwich norm.
    assert param_count(shape_of("pangu_ultra_135b")).total == pytest.approx(135e9, rel=1e-2)


def test_zero_paper_figure_1_model_states():
    # Rajbhandari et al. 2020 (ZeRO), Figure 1: 7.5B params, 64 GPUs, fp16 w+g and K=12 optimizer bytes:
    # baseline 120 GB, P_os 31.4 GB, P_os+g 16.6 GB, P_os+g+p 1.88 GB.
    gb = [sum(model_states(7.5e9, z, 64, (2.0, 2.0, 12.0))) / 1e9 for z in range(4)]
    assert [round(x, 1) for x in gb[:3]] == [120.0, 31.4, 16.6]
    assert round(gb[3], 2) == 1.88


def _gpt(hidden, heads, layers):
    return ModelShape(hidden=hidden, layers=layers, heads=heads, kv_heads=heads, head_dim=hidden // heads,
                      ffn=4 * hidden, vocab=51200, seq=2048)


def test_korthikanti_activation_formula():
    # Korthikanti et al. 2022: selective recompute cuts activation memory by 70% for GPT-3 175B
    # (5as/h = 80) and 65% for MT-NLG 530B; TP+SP stores sbh(34/t + 5as/(ht)).
    for shape, cut in ((_gpt(12288, 96, 96), 0.70), (_gpt(20480, 128, 105), 0.65)):
        none = activation_bytes_per_layer(shape, 1, flash_attention=False)
        sel = activation_bytes_per_layer(shape, 1, recompute="selective", flash_attention=False)
        assert 1 - sel / none == pytest.approx(cut, abs=5e-3)
    gpt3 = _gpt(12288, 96, 96)
    assert activation_bytes_per_layer(gpt3, 1, tp=8, sequence_parallel=True,
                                      flash_attention=False) == pytest.approx(2048 * 12288 * (34 + 80) / 8)
    assert activation_bytes_per_layer(gpt3, 1, tp=8, flash_attention=False) == pytest.approx(
        2048 * 12288 * (10 + 24 / 8 + 80 / 8))


# ------------------------------------------------------------------ monotonic properties

def test_more_tp_means_less_memory_per_device():
    peaks = [plan_of(*L70, f"parallel.tp={t}").peak_gb for t in (1, 2, 4, 8)]
    assert peaks == sorted(peaks, reverse=True) and len(set(peaks)) == 4


def test_higher_zero_stage_means_less_memory_and_zero3_costs_more_dp_traffic():
    plans = [plan_of(*L70, f"parallel.zero_stage={z}") for z in range(4)]
    states = [states_gb(p.memory_first) for p in plans]
    assert states == sorted(states, reverse=True) and len(set(states)) == 4
    assert plans[3].comm.dp_gb == pytest.approx(1.5 * plans[1].comm.dp_gb)
    assert plans[1].comm.dp_gb == pytest.approx(2 * 7 / 8 * plans[1].memory_first.params * 4 / 1e9, rel=1e-6)


def test_recompute_order_without_and_with_flash_attention():
    def acts(hw, rc):
        return plan_of("model=llama3_8b", "parallel=dp8", hw, f"parallel.recompute={rc}").peak.activations_gb
    cpu = [acts("hardware=cpu", rc) for rc in ("full", "selective", "none")]
    assert cpu[0] < cpu[1] < cpu[2]
    npu = [acts("hardware=ascend910b_1x8", rc) for rc in ("full", "selective", "none")]
    assert npu[0] < npu[1] == npu[2]          # flash attention never stores the s^2 scores


def test_bf16_main_grads_halve_grad_memory():
    fp32 = plan_of(*L70).memory_first
    bf16 = plan_of(*L70, "parallel.grad_fp32=false").memory_first
    assert bf16.grads_gb == pytest.approx(fp32.grads_gb / 2)


def test_pipeline_stages_first_holds_activations_last_holds_logits():
    p = plan_of(*L70)
    first, last = p.memory_first, p.memory_last
    assert first.activations_gb == pytest.approx(2 * last.activations_gb)   # p=2 micro-batches in flight vs 1
    assert first.logits_gb == 0 and last.logits_gb == pytest.approx(8192 * 128256 * 4 / 4 / 1e9)
    assert p.peak_stage == "first"


def test_interleaving_and_few_micro_batches_scale_first_stage_activations():
    base = ["model=llama3_70b", "parallel=dp2tp4pp8vpp2", "hardware=ascend910b_8x8"]
    v2 = plan_of(*base).memory_first.activations_gb
    v1 = plan_of(*base, "parallel.vpp=1").memory_first.activations_gb
    assert v2 / v1 == pytest.approx(1 + 7 / (8 * 2))                       # 1 + (p-1)/(p*v)
    few = plan_of(*base, "parallel.vpp=1", "train.global_batch_size=8")     # m = 4 < p = 8 in flight
    assert few.layout.grad_accum == 4
    assert few.memory_first.activations_gb == pytest.approx(v1 * 4 / 8)


def test_expert_parallel_shards_expert_weights():
    ep8 = plan_of("model=qwen3_30b_a3b", "parallel=dp8ep8", "hardware=ascend910b_1x8").peak
    ep1 = plan_of("model=qwen3_30b_a3b", "parallel=dp8ep8", "hardware=ascend910b_1x8", "parallel.ep=1").peak
    assert ep8.weights_gb < ep1.weights_gb / 4


# ------------------------------------------------------------------ time, days, checkpoint

def test_single_device_mfu_equals_assumed_efficiency_and_full_recompute_costs_a_forward():
    p = plan_of()                                          # tiny on one CPU: no bubble, no communication
    assert p.comm.exposed_s == 0 and p.bubble == 0
    assert p.mfu == pytest.approx(0.45)
    full = plan_of("parallel.recompute=full")
    assert full.hfu == pytest.approx(0.45) and full.mfu == pytest.approx(0.45 * 3 / 4)
    assert p.tokens_per_s * p.step_s == pytest.approx(p.tokens_per_step)


def test_step_time_adds_bubble_and_exposed_comm():
    p = plan_of(*L70)
    assert p.step_s == pytest.approx(p.compute_s / (1 - p.bubble) + p.comm.exposed_s)
    assert p.comm.inter_node == {"tp": False, "dp": True, "ep": False, "pp": True}
    assert p.comm.tp_s == pytest.approx(p.comm.tp_gb / 196)                 # HCCS inside the node
    assert p.comm.pp_s == pytest.approx(p.comm.pp_gb / 25)                  # RoCE between nodes


def test_tp_across_nodes_is_flagged():
    p = plan_of(*L70, "parallel.tp=16", "parallel.dp=2")
    assert p.comm.inter_node["tp"] and any("spans nodes" in w for w in p.warnings)


def test_days_per_phase_follow_token_budgets():
    p = plan_of(*L70)
    assert [ph.name for ph in p.phases] == ["general", "reasoning", "anneal"]
    assert [ph.tokens for ph in p.phases] == pytest.approx([10.5e12, 3e12, 1.5e12])
    assert p.total_days == pytest.approx(sum(ph.days for ph in p.phases))
    assert p.total_days == pytest.approx(15e12 / p.tokens_per_s / 86400)
    one = plan_of(*L70, "phase=reasoning", "phase.token_fraction=null", "phase.tokens=1e12")
    assert [(ph.name, ph.tokens) for ph in one.phases] == [("reasoning", 1e12)]


def test_checkpoint_interval_is_the_optimum():
    p = plan_of(*L70)
    ck = p.checkpoint
    assert ck.mtbf_hours == pytest.approx(1 / (1.97e-5 * 64))
    assert ck.write_s == pytest.approx(ck.gb_per_device * 8 / 2.0)   # a node's 8 shards at 2 GB/s (the default)
    assert plan_of(*L70, "hardware.checkpoint_write_gbps=4").checkpoint.write_s == pytest.approx(ck.write_s / 2)
    t, mtbf = ck.interval_minutes * 60, ck.mtbf_hours * 3600
    assert t == pytest.approx(optimal_checkpoint_interval(ck.write_s, mtbf))
    at = functools.partial(checkpoint_overhead, write_s=ck.write_s, mtbf_s=mtbf, restart_s=600.0)
    assert at(t) < at(t / 2) and at(t) < at(2 * t)
    assert ck.interval_steps == pytest.approx(t / p.step_s)
    late = plan_of(*L70, f"train.save_every_minutes={ck.interval_minutes * 3:.0f}")
    assert any("save_every_minutes" in w for w in late.warnings)
    assert not any("save_every_minutes" in w for w in p.warnings)


# ------------------------------------------------------------------ robustness and report

@pytest.mark.parametrize("overrides", [
    ["parallel.tp=0", "parallel.dp=0"],
    ["parallel.micro_batch_size=0"],
    ["model=llama3_70b", "parallel=dp16tp8pp8"],          # 94/80 layers, batch not divisible: invalid layout
    ["train.global_batch_size=3", "parallel=dp2"],        # grad_accum resolves to a fraction
    ["hardware.failures_per_device_hour=0", "hardware.peak_tflops=0", "hardware.inter_node_gbps=0"],
    ["parallel.recompute=bogus", "parallel.pipeline_schedule=bogus", "parallel.pipeline_layers=[1,2]"],
])
def test_invalid_layouts_plan_without_crashing(overrides):
    p = planner.plan(ResolvedRun.of(compose(overrides)))
    json.dumps(p.to_dict(), allow_nan=False)
    planner.format_plan(p)


def test_format_plan_states_the_verdict():
    bad = plan_of(*L70)
    text = planner.format_plan(bad)
    assert f"DOES NOT FIT by {-bad.headroom_gb:.1f} GB" in text and "ignores gradients" in text
    assert 12 <= len(text.splitlines()) <= 30   # a table read in five seconds
    good = planner.format_plan(plan_of())
    assert "FITS" in good and "DOES NOT FIT" not in good and "general" in good and "save every" in good


def test_model_shape_from_any_attribute_object():
    cfg = SimpleNamespace(hidden_size=256, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=None,
                          ffn_hidden_size=688, vocab_size=100, seq_length=64)
    shape = model_shape(cfg)
    assert shape.head_dim == 64 and shape.num_experts == 0 and not shape.tie_embeddings
    assert shape.moe_ffn == 688
