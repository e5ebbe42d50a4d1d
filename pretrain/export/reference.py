"""A NumPy forward pass of the exported model, written from transformers 4.57's modeling code
(models/llama/modeling_llama.py, qwen3/modeling_qwen3.py, qwen3_moe/modeling_qwen3_moe.py), reading
the exported tensors by their transformers names. It is what the export is checked against where
torch is not installed: the same logits as our MindSpore model on the same tokens means the names,
the splits of the fused weights, the transposes and config.json all say what was trained.

Computed in float64, so its own rounding is far below float32's; one causal sequence per row with
positions 0..T-1 (no packed documents: what transformers does with no attention_mask).
"""
from typing import Callable, Dict

import numpy as np

from pretrain.export.architecture import Architecture

Weights = Callable[[str], np.ndarray]   # transformers name -> array


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    # LlamaRMSNorm: x * rsqrt(mean(x^2) + eps), then the gain
    return weight * (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps))


def rotate_half(x: np.ndarray) -> np.ndarray:
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def rope(seq: int, head_dim: int, theta: float):
    """(cos, sin) [seq, head_dim] of LlamaRotaryEmbedding's default rope type."""
    inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    freqs = np.outer(np.arange(seq, dtype=np.float64), inv_freq)
    emb = np.concatenate([freqs, freqs], axis=-1)
    return np.cos(emb), np.sin(emb)


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def attention(arch: Architecture, w: Weights, pre: str, x: np.ndarray, cos, sin) -> np.ndarray:
    b, t, _ = x.shape
    hd = arch.head_dim
    q = (x @ w(pre + "q_proj.weight").T).reshape(b, t, arch.heads, hd)
    k = (x @ w(pre + "k_proj.weight").T).reshape(b, t, arch.kv_heads, hd)
    v = (x @ w(pre + "v_proj.weight").T).reshape(b, t, arch.kv_heads, hd)
    if arch.qk_norm:   # Qwen3: RMSNorm over each head's dim, before RoPE
        q = rms_norm(q, w(pre + "q_norm.weight"), arch.norm_eps)
        k = rms_norm(k, w(pre + "k_norm.weight"), arch.norm_eps)
    q, k, v = (a.transpose(0, 2, 1, 3) for a in (q, k, v))           # [b, heads, t, hd]
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    rep = arch.heads // arch.kv_heads                                  # repeat_kv
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(np.asarray(hd, x.dtype))
    scores = np.where(np.triu(np.ones((t, t), bool), 1), -np.inf, scores)
    out = (softmax(scores) @ v).transpose(0, 2, 1, 3).reshape(b, t, arch.heads * hd)
    return out @ w(pre + "o_proj.weight").T


def mlp(w: Weights, pre: str, x: np.ndarray) -> np.ndarray:
    gated = silu(x @ w(pre + "gate_proj.weight").T) * (x @ w(pre + "up_proj.weight").T)
    return gated @ w(pre + "down_proj.weight").T


def moe(arch: Architecture, w: Weights, pre: str, x: np.ndarray) -> np.ndarray:
    """Qwen3MoeSparseMoeBlock: softmax over the router's logits, top-k, renormalised if norm_topk_prob."""
    shape = x.shape
    tokens = x.reshape(-1, shape[-1])
    probs = softmax(tokens @ w(pre + "gate.weight").T)
    top = np.argsort(-probs, axis=-1, kind="stable")[:, :arch.experts_per_token]
    gates = np.take_along_axis(probs, top, -1)
    if arch.norm_topk_prob:
        gates = gates / gates.sum(-1, keepdims=True)
    out = np.zeros_like(tokens)
    for e in np.unique(top):
        rows, slot = np.nonzero(top == e)
        out[rows] += gates[rows, slot, None] * mlp(w, f"{pre}experts.{e}.", tokens[rows])
    return out.reshape(shape)


def logits(arch: Architecture, weights: Dict[str, np.ndarray], input_ids: np.ndarray,
           dtype: type = np.float64) -> np.ndarray:
    """[batch, seq, vocab] logits of the exported model for input_ids [batch, seq], computed in `dtype`
    (float64: the reference; float32: the same arithmetic at float32, whose distance from the
    float64 result is the rounding noise any float32 implementation of this model carries)."""
    def w(name: str) -> np.ndarray:
        return np.asarray(weights[name], dtype=dtype)

    cos, sin = (a.astype(dtype) for a in rope(input_ids.shape[1], arch.head_dim, arch.rope_theta))
    h = w("model.embed_tokens.weight")[input_ids]
    for i in range(arch.layers):
        pre = f"model.layers.{i}."
        h = h + attention(arch, w, pre + "self_attn.", rms_norm(h, w(pre + "input_layernorm.weight"),
                                                                 arch.norm_eps), cos, sin)
        x = rms_norm(h, w(pre + "post_attention_layernorm.weight"), arch.norm_eps)
        h = h + (moe(arch, w, pre + "mlp.", x) if arch.experts else mlp(w, pre + "mlp.", x))
    h = rms_norm(h, w("model.norm.weight"), arch.norm_eps)
    head = w("model.embed_tokens.weight" if arch.tie_embeddings else "lm_head.weight")
    return h @ head.T
