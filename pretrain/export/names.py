"""MindFormers Mcore parameter names and layouts -> transformers' (Llama, Qwen3, Qwen3-MoE).

The inverse of what MindFormers 1.9.0 does when it loads a Hugging Face checkpoint
(parallel_core/utils/model_mixin.py and models/qwen3*/utils.py):
- linear_qkv is Megatron's grouped layout: per key/value group, that group's query heads, then its
  key head, then its value head, each head_dim rows ([groups * (q_per_group + 2) * head_dim, hidden]);
- a dense linear_fc1 interleaves gate and up rows (gate_0, up_0, gate_1, ...: [2 * ffn, hidden]), the
  MLPInterleaved layout of TransformerConfig.use_interleaved_weight_layout_mlp, True by default and
  left so by pretrain/model/mindformers_config.py (concat_ffn_weight_megatron builds it);
- MoE experts are stacked and transposed: weight1 is [experts * hidden, 2 * moe_ffn] with each
  expert's gate columns first, weight2 [experts * moe_ffn, hidden];
- the router is `mlp.router.weight`, transformers' `mlp.gate.weight`.
Buffers that are not weights (the router's fi_accu, experts' expert_tokens) are left out. Each
output tensor is made on demand (`make`), so a writer holds one tensor at a time.
"""
import re
from dataclasses import dataclass
from typing import Callable, Dict, List, Tuple

import numpy as np

from pretrain.config.errors import PretrainRunError
from pretrain.export.architecture import Architecture
from pretrain.export.safetensors_file import StoredTensor

# Non-weight state the training model keeps beside its parameters (MoE load statistics).
BUFFERS = re.compile(r"\.(fi_accu|expert_tokens)$")
_LAYER_RENAMES = {
    "input_layernorm.weight": "input_layernorm.weight",
    "pre_mlp_layernorm.weight": "post_attention_layernorm.weight",
    "self_attention.linear_proj.weight": "self_attn.o_proj.weight",
    "self_attention.q_layernorm.weight": "self_attn.q_norm.weight",
    "self_attention.k_layernorm.weight": "self_attn.k_norm.weight",
    "mlp.linear_fc2.weight": "mlp.down_proj.weight",
    "mlp.router.weight": "mlp.gate.weight",
}


@dataclass(frozen=True)
class HFTensor:
    name: str
    tag: str                       # safetensors dtype of the source (F32, BF16, ...)
    shape: Tuple[int, ...]
    make: Callable[[], np.ndarray]


Source = Dict[str, StoredTensor]   # Mcore name -> its tensor in the checkpoint file (not loaded)


def hf_tensors(arch: Architecture, source: Source) -> List[HFTensor]:
    """Every transformers tensor of the model, in transformers' order; PretrainRunError when the
    checkpoint lacks a weight the architecture needs or has one it does not know."""
    weights = {k: v for k, v in source.items() if not BUFFERS.search(k)}
    used: set = set()

    def take(name: str) -> StoredTensor:
        if name not in weights:
            raise PretrainRunError(f"checkpoint has no {name!r}: not a {arch.hf_class} checkpoint of this "
                                   f"config (it has {len(weights)} weights, e.g. "
                                   f"{next(iter(weights), None)!r})")
        used.add(name)
        return weights[name]

    out: List[HFTensor] = []

    def emit(hf: str, tag: str, shape: Tuple[int, ...], make: Callable[[], np.ndarray]) -> None:
        out.append(HFTensor(hf, tag, tuple(int(d) for d in shape), make))

    def rename(mcore: str, hf: str) -> None:
        t = take(mcore)
        emit(hf, t.tag, t.shape, t.load)

    rename("embedding.word_embeddings.weight", "model.embed_tokens.weight")
    for i in range(arch.layers):
        mc, hf = f"decoder.layers.{i}.", f"model.layers.{i}."
        for src, dst in _LAYER_RENAMES.items():
            if src.startswith("self_attention.q") or src.startswith("self_attention.k_"):
                if not arch.qk_norm:
                    continue
            if src == "mlp.linear_fc2.weight" and arch.experts:
                continue
            if src == "mlp.router.weight" and not arch.experts:
                continue
            rename(mc + src, hf + dst)
        _qkv(arch, mc, hf, take, emit)
        if arch.experts:
            _experts(arch, mc, hf, take, emit)
        else:
            fc1 = take(mc + "mlp.linear_fc1.weight")
            _expect(fc1, (2 * arch.ffn, arch.hidden), mc + "mlp.linear_fc1.weight")
            emit(hf + "mlp.gate_proj.weight", fc1.tag, (arch.ffn, arch.hidden), lambda t=fc1: t.load()[0::2])
            emit(hf + "mlp.up_proj.weight", fc1.tag, (arch.ffn, arch.hidden), lambda t=fc1: t.load()[1::2])
    rename("decoder.final_layernorm.weight", "model.norm.weight")
    if not arch.tie_embeddings:
        rename("output_layer.weight", "lm_head.weight")
    elif "output_layer.weight" in weights:
        raise PretrainRunError("the run's config ties the head to the embedding (model.tie_embeddings=true) "
                               "but its checkpoint has a separate output_layer.weight: the config and its "
                               "checkpoint disagree")
    extra = sorted(set(weights) - used)
    if extra:
        raise PretrainRunError(f"checkpoint has weight {extra[0]!r} ({len(extra)} in all) that "
                               f"{arch.hf_class} has no place for: the run's config and its checkpoint "
                               f"disagree")
    _sort_like_transformers(out)
    return out


def _qkv(arch: Architecture, mc: str, hf: str, take, emit) -> None:
    name = mc + "self_attention.linear_qkv.weight"
    qkv = take(name)
    tag = qkv.tag
    groups, per_group, hd = arch.kv_heads, arch.heads // arch.kv_heads, arch.head_dim
    _expect(qkv, (groups * (per_group + 2) * hd, arch.hidden), name)

    def part(lo: int, hi: int) -> np.ndarray:
        grouped = qkv.load().reshape(groups, (per_group + 2) * hd, arch.hidden)
        return grouped[:, lo:hi].reshape(-1, arch.hidden)

    q_rows = per_group * hd
    emit(hf + "self_attn.q_proj.weight", tag, (arch.heads * hd, arch.hidden), lambda: part(0, q_rows))
    emit(hf + "self_attn.k_proj.weight", tag, (groups * hd, arch.hidden),
         lambda: part(q_rows, q_rows + hd))
    emit(hf + "self_attn.v_proj.weight", tag, (groups * hd, arch.hidden),
         lambda: part(q_rows + hd, q_rows + 2 * hd))


def _experts(arch: Architecture, mc: str, hf: str, take, emit) -> None:
    e, h, f = arch.experts, arch.hidden, arch.moe_ffn
    w1, w2 = take(mc + "mlp.experts.weight1"), take(mc + "mlp.experts.weight2")
    _expect(w1, (e * h, 2 * f), mc + "mlp.experts.weight1")
    _expect(w2, (e * f, h), mc + "mlp.experts.weight2")
    for j in range(e):   # each expert cut from the same two loaded tensors (the reader keeps them)
        pre = f"{hf}mlp.experts.{j}."
        emit(pre + "gate_proj.weight", w1.tag, (f, h), lambda j=j: w1.load().reshape(e, h, 2 * f)[j, :, :f].T)
        emit(pre + "up_proj.weight", w1.tag, (f, h), lambda j=j: w1.load().reshape(e, h, 2 * f)[j, :, f:].T)
        emit(pre + "down_proj.weight", w2.tag, (h, f), lambda j=j: w2.load().reshape(e, f, h)[j].T)


def _expect(array: StoredTensor, shape: Tuple[int, ...], name: str) -> None:
    if tuple(array.shape) != tuple(shape):
        raise PretrainRunError(f"checkpoint's {name!r} has shape {tuple(array.shape)}, the run's config "
                               f"makes "
                               f"{tuple(shape)}: the config and its checkpoint disagree")


def _sort_like_transformers(tensors: List[HFTensor]) -> None:
    """Embedding, then layers in numeric order, then the final norm and the head (what a reader of
    the index or a shard expects to see; the format does not require an order)."""
    def key(t: HFTensor):
        m = re.match(r"model\.layers\.(\d+)\.(.*)", t.name)
        if m:
            return (1, int(m.group(1)), _natural(m.group(2)))
        return (0 if "embed_tokens" in t.name else 2, 0, _natural(t.name))
    tensors.sort(key=key)


def _natural(name: str):
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]
