"""Which transformers class a trained model is, from the run's frozen `model` block.

A small registry (the transformers classes the project trains) and the one place that refuses what
has no transformers class, naming why. The numbers are read once into `Architecture`, which the
name mapping, the config writer and the NumPy reference share.
"""
from dataclasses import dataclass
from typing import Any, Dict

from pretrain.config.errors import PretrainConfigError

# model_type -> transformers architecture (what config.json's "architectures" names)
CLASSES: Dict[str, str] = {
    "llama": "LlamaForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
}


@dataclass(frozen=True)
class Architecture:
    model_type: str           # a key of CLASSES
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    max_positions: int
    rope_theta: float
    norm_eps: float
    tie_embeddings: bool
    experts: int = 0          # 0: dense
    experts_per_token: int = 0
    moe_ffn: int = 0
    norm_topk_prob: bool = True   # top-k gates renormalised to sum to 1, as MindFormers trains

    @property
    def hf_class(self) -> str:
        return CLASSES[self.model_type]

    @property
    def qk_norm(self) -> bool:
        return self.model_type != "llama"   # Qwen3 and Qwen3-MoE always carry q_norm / k_norm


def of(model: Any) -> Architecture:
    """The Architecture of a run's `model` config, or PretrainConfigError naming why it has no
    transformers class."""
    name, arch = model.get("name", "?"), str(model.get("arch"))
    experts = int(model.get("num_experts") or 0)
    if model.get("sandwich_norm"):
        raise PretrainConfigError(
            f"model={name} uses Pangu's depth-scaled sandwich norm (model.sandwich_norm=true): transformers "
            f"has no class with post-sub-layer norms, so an export would load as a different model; "
            f"export refuses it (use MindFormers' own checkpoint for this architecture)")
    if arch not in ("llama", "qwen3"):
        raise PretrainConfigError(f"model.arch={arch!r} (model={name}): no transformers class known for it; "
                                  f"export knows {', '.join(f'{k} ({v})' for k, v in CLASSES.items())}")
    if arch == "llama" and model.get("qk_layernorm"):
        raise PretrainConfigError(f"model={name}: arch=llama with model.qk_layernorm=true has no "
                                  f"transformers class (LlamaForCausalLM has no QK-norm); train it as "
                                  f"arch=qwen3 to export it")
    if arch == "llama" and experts:
        raise PretrainConfigError(f"model={name}: arch=llama with model.num_experts={experts} has no "
                                  f"transformers class here; MoE exports as Qwen3MoeForCausalLM (arch=qwen3)")
    if experts and int(model.get("num_shared_experts") or 0):
        raise PretrainConfigError(f"model={name}: model.num_shared_experts={model.num_shared_experts}: "
                                  f"Qwen3MoeForCausalLM has no shared experts, so it cannot hold this model")
    hidden, heads = int(model.hidden_size), int(model.num_heads)
    return Architecture(
        model_type="llama" if arch == "llama" else ("qwen3_moe" if experts else "qwen3"),
        hidden=hidden, layers=int(model.num_layers), heads=heads, kv_heads=int(model.num_kv_heads),
        head_dim=int(model.get("head_dim") or hidden // heads), ffn=int(model.ffn_hidden_size),
        vocab=int(model.vocab_size), max_positions=int(model.max_position_embeddings),
        rope_theta=float(model.rope_theta), norm_eps=float(model.norm_eps),
        tie_embeddings=bool(model.get("tie_embeddings")), experts=experts,
        experts_per_token=int(model.get("num_experts_per_token") or 0),
        moe_ffn=int(model.get("moe_ffn_hidden_size") or model.ffn_hidden_size) if experts else 0)


def from_hf_config(config: Dict[str, Any]) -> Architecture:
    """The Architecture a written config.json describes (what the reference forward pass runs, so a
    wrong key in config.json shows up as different logits)."""
    experts = int(config.get("num_experts") or 0)
    return Architecture(
        model_type=str(config["model_type"]), hidden=int(config["hidden_size"]),
        layers=int(config["num_hidden_layers"]), heads=int(config["num_attention_heads"]),
        kv_heads=int(config["num_key_value_heads"]),
        head_dim=int(config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]),
        ffn=int(config["intermediate_size"]), vocab=int(config["vocab_size"]),
        max_positions=int(config["max_position_embeddings"]), rope_theta=float(config["rope_theta"]),
        norm_eps=float(config["rms_norm_eps"]), tie_embeddings=bool(config.get("tie_word_embeddings")),
        experts=experts, experts_per_token=int(config.get("num_experts_per_tok") or 0),
        moe_ffn=int(config.get("moe_intermediate_size") or 0),
        norm_topk_prob=bool(config.get("norm_topk_prob", False)) if experts else True)
