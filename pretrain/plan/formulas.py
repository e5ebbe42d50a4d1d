"""The planner's formulas (F1-F6 below), as pure functions of numbers.

Nothing here reads a config: planner.py maps the composed config onto these. Units are bytes,
FLOPs and seconds; GB means 1e9 bytes throughout (tests/test_planner.py's reference values use decimal GB).
"""
import math
from dataclasses import dataclass
from typing import Any, Optional, Tuple

GB = 1e9


@dataclass(frozen=True)
class ModelShape:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    seq: int
    tie_embeddings: bool = False
    qk_layernorm: bool = False
    num_experts: int = 0              # 0: dense
    experts_per_token: int = 0
    moe_ffn: int = 0
    shared_experts: int = 0           # each as wide as a routed expert (moe_ffn)
    sandwich_norm: bool = False       # Pangu Ultra's DSSN: two extra norms per layer


def model_shape(model_cfg: Any) -> ModelShape:
    """cfg.model (a DictConfig or any object with the schema's attribute names) -> ModelShape."""
    def get(key, default=None):
        value = getattr(model_cfg, key, default)
        return default if value is None else value

    hidden, heads = int(get("hidden_size")), int(get("num_heads"))
    head_dim = get("head_dim")
    return ModelShape(
        hidden=hidden, layers=int(get("num_layers")), heads=heads,
        kv_heads=int(get("num_kv_heads", heads)),
        head_dim=int(head_dim) if head_dim is not None else (hidden // heads if heads else 0),
        ffn=int(get("ffn_hidden_size")), vocab=int(get("vocab_size")), seq=int(get("seq_length")),
        tie_embeddings=bool(get("tie_embeddings", False)), qk_layernorm=bool(get("qk_layernorm", False)),
        num_experts=int(get("num_experts", 0)), experts_per_token=int(get("num_experts_per_token", 0)),
        moe_ffn=int(get("moe_ffn_hidden_size", get("ffn_hidden_size"))),
        shared_experts=int(get("num_shared_experts", 0)), sandwich_norm=bool(get("sandwich_norm", False)),
    )


# ---------------------------------------------------------------- F1 parameters

@dataclass(frozen=True)
class LayerParams:
    """One transformer layer split by how it is sharded: dense parts over tp, routed experts over
    ep (and tp, Megatron's default expert-tensor-parallel size), and the part one token uses."""
    dense: int        # attention, norms, router, shared experts
    experts: int      # all routed experts
    active: int       # dense + the top-k routed experts


def layer_params(shape: ModelShape) -> LayerParams:
    h, hd = shape.hidden, shape.head_dim
    attention = 2 * h * shape.heads * hd + 2 * h * shape.kv_heads * hd     # q, o + k, v; no biases
    if shape.qk_layernorm:
        attention += 2 * hd                                                 # q_norm, k_norm over head_dim
    norms = (4 if shape.sandwich_norm else 2) * h
    if shape.num_experts > 0:
        expert = 3 * h * shape.moe_ffn                                      # SwiGLU gate, up, down
        dense = attention + norms + h * shape.num_experts + shape.shared_experts * expert
        return LayerParams(dense, shape.num_experts * expert, dense + shape.experts_per_token * expert)
    dense = attention + norms + 3 * h * shape.ffn
    return LayerParams(dense, 0, dense)


@dataclass(frozen=True)
class ParamCount:
    total: int
    active: int           # what one token touches (MoE: top-k + shared experts); == total when dense
    per_layer: int
    embedding: int
    head: int             # 0 when tied to the embedding
    final_norm: int


def param_count(shape: ModelShape) -> ParamCount:
    lp = layer_params(shape)
    per_layer = lp.dense + lp.experts
    embedding = shape.vocab * shape.hidden
    head = 0 if shape.tie_embeddings else embedding
    outside = embedding + head + shape.hidden
    return ParamCount(total=shape.layers * per_layer + outside, active=shape.layers * lp.active + outside,
                      per_layer=per_layer, embedding=embedding, head=head, final_norm=shape.hidden)


# ---------------------------------------------------------------- F2 FLOPs

def flops_per_token(shape: ModelShape, seq: Optional[int] = None) -> float:
    """Training FLOPs per token (fwd + bwd, no recompute): 6·N_mm + 12·L·a·hd·s. The embedding
    lookup is free; the output head is a V·h matmul whether or not it is tied."""
    pc = param_count(shape)
    n_matmul = pc.active - pc.embedding - pc.head + shape.vocab * shape.hidden
    s = shape.seq if seq is None else seq
    return 6.0 * n_matmul + 12.0 * shape.layers * shape.heads * shape.head_dim * s


# ---------------------------------------------------------------- F3 model states

def bytes_per_param(precision: str, grad_fp32: bool) -> Tuple[float, float, float]:
    """(weights, grads, optimizer) bytes per parameter. bf16: bf16 weights, fp32 or bf16 main grads,
    fp32 master + Adam m + v. fp32 (CPU): the weights are the master copy, so Adam adds only m + v."""
    if precision == "fp32":
        return 4.0, 4.0, 8.0
    return 2.0, 4.0 if grad_fp32 else 2.0, 12.0


def model_states(params: float, zero_stage: int, shard_group: float,
                 per_param: Tuple[float, float, float]) -> Tuple[float, float, float]:
    """(weights, grads, optimizer) bytes on one device. ZeRO-1 shards the optimizer over the
    data-parallel group, ZeRO-2 also the grads, ZeRO-3 also the weights."""
    w, g, o = per_param
    d = max(shard_group, 1.0)
    return (params * w / (d if zero_stage >= 3 else 1.0),
            params * g / (d if zero_stage >= 2 else 1.0),
            params * o / (d if zero_stage >= 1 else 1.0))


# ---------------------------------------------------------------- F4 activations

def activation_bytes_per_layer(shape: ModelShape, micro_batch: int, tp: int = 1,
                               sequence_parallel: bool = False, recompute: str = "none",
                               flash_attention: bool = True, cp: int = 1, element_scale: float = 1.0
                               ) -> float:
    """Bytes one layer keeps for backward, per micro-batch (Korthikanti et al. 2022, "Reducing
    Activation Recomputation in Large Transformer Models", eqs. 1-5). No parallelism:
    sbh(34 + 5as/h); TP: sbh(10 + 24/t + 5as/(ht)); TP+SP: sbh(34/t + 5as/(ht)). Selective
    recompute drops the 5as/h attention-score term, and flash attention never stores it. Full
    recompute keeps only the layer input, 2sbh (÷t with SP); the caller adds one layer's working
    set. The constants assume 2-byte activations; element_scale=2 for fp32."""
    t = max(tp, 1)
    s_local = shape.seq / max(cp, 1)
    sbh = s_local * micro_batch * shape.hidden
    if recompute == "full":
        return 2.0 * sbh / (t if sequence_parallel else 1) * element_scale
    linear = 34.0 / t if sequence_parallel else 10.0 + 24.0 / t
    keeps_scores = not flash_attention and recompute != "selective"
    scores = 5.0 * shape.heads * shape.seq / (shape.hidden * t) if keeps_scores and shape.hidden else 0.0
    return sbh * (linear + scores) * element_scale


def chunks_in_flight(rank: int, pp: int, vpp: int, micro_batches: float, schedule: str = "1f1b") -> float:
    """Model chunks whose activations a pipeline rank holds at its peak: the warm-up forwards of
    Megatron's (interleaved) 1F1B plus the one in progress, never more than it runs in a step.
    Rank 0 without interleaving holds p micro-batches (≈ L layers); with v chunks per rank it holds
    v·p + p − 1 chunks of L/(p·v) layers, i.e. L·(1 + (p−1)/(p·v)). zero_bubble is MindSpore's ZB-V
    (two chunks per rank in a V): every rank peaks at 2p chunks of L/(2p) layers, 1F1B's L layers."""
    if pp <= 1:
        return 1.0
    if schedule == "zero_bubble":
        return float(min(max(micro_batches, 1) * 2, 2 * pp))
    warmup = (pp - rank - 1) * 2 + (vpp - 1) * pp if vpp > 1 else pp - rank - 1
    return float(min(max(micro_batches, 1) * max(vpp, 1), warmup + 1))


# ---------------------------------------------------------------- F5 pipeline bubble

def bubble_fraction(pp: int, micro_batches: float, vpp: int = 1, schedule: str = "1f1b") -> float:
    """Share of the step a pipeline rank idles. 1F1B: (p−1)/(m+p−1); interleaved: (p−1)/(v·m+p−1).
    zero_bubble is the schedule MindSpore runs for it, ZB-V (pipeline_scheduler zero_bubble_v, two
    virtual stages per rank; Qi et al. 2024): with the backward split into input- and weight-gradient
    passes its bubble is (p−1)(T_F + T_B − 2·T_W), zero at T_F = T_B = T_W, once m ≥ 2p micro-batches
    fill the V (validate.py requires it, as MindFormers' TransformerConfig does); planned as 0."""
    if pp <= 1:
        return 0.0
    m = max(micro_batches, 1)
    if schedule == "zero_bubble":
        return 0.0 if m >= 2 * pp else (pp - 1) / (2 * m + pp - 1)
    return (pp - 1) / (max(vpp, 1) * m + pp - 1)


# ---------------------------------------------------------------- F6 communication

def ring_allreduce_bytes(group: float, payload_bytes: float) -> float:
    """Bytes each rank sends in a ring all-reduce (or reduce-scatter + all-gather) of a payload."""
    return 2.0 * (group - 1) / group * payload_bytes if group > 1 else 0.0


def group_spans_nodes(stride: int, size: int, devices_per_node: int) -> bool:
    """A group of `size` ranks `stride` apart (Megatron's rank order tp < cp < dp < pp, ep inside
    dp) leaves the node once it covers more ranks than a node holds."""
    return size > 1 and stride * size > devices_per_node


# ---------------------------------------------------------------- checkpoint interval

def optimal_checkpoint_interval(write_s: float, mtbf_s: float) -> float:
    """Young/Daly first-order optimum T* = sqrt(2·δ·MTBF)."""
    return math.sqrt(2.0 * write_s * mtbf_s)


def checkpoint_overhead(interval_s: float, write_s: float, mtbf_s: float, restart_s: float) -> float:
    """Expected share of wall time lost: writing (δ/T) plus, per failure, half an interval of
    redone work and the restart ((T/2 + R)/MTBF)."""
    return write_s / interval_s + (interval_s / 2.0 + restart_s) / mtbf_s
