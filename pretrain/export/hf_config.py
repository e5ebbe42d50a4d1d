"""config.json and generation_config.json of the exported model, keyed as transformers 4.57's
LlamaConfig / Qwen3Config / Qwen3MoeConfig name them."""
from typing import Any, Dict

from pretrain.export.architecture import Architecture
from pretrain.model.mindformers_config import MOE_AUX_LOSS_COEFF

TRANSFORMERS_VERSION = "4.57.1"   # the version these keys were written for and the tests load them with


def config(arch: Architecture, dtype: str, special_ids: Dict[str, int], init_std: float) -> Dict[str, Any]:
    """`special_ids`: {"bos": id, "eos": id, "pad": id} as the model was trained (absent: None)."""
    out: Dict[str, Any] = {
        "architectures": [arch.hf_class],
        "model_type": arch.model_type,
        "vocab_size": arch.vocab,
        "hidden_size": arch.hidden,
        "intermediate_size": arch.ffn,
        "num_hidden_layers": arch.layers,
        "num_attention_heads": arch.heads,
        "num_key_value_heads": arch.kv_heads,
        "head_dim": arch.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": arch.max_positions,
        "rms_norm_eps": arch.norm_eps,
        "rope_theta": arch.rope_theta,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": arch.tie_embeddings,
        "initializer_range": init_std,
        "use_cache": True,
        "bos_token_id": special_ids.get("bos"),
        "eos_token_id": special_ids.get("eos"),
        "pad_token_id": special_ids.get("pad"),
        "torch_dtype": dtype,
        "transformers_version": TRANSFORMERS_VERSION,
    }
    if arch.model_type == "llama":
        out.update({"mlp_bias": False, "pretraining_tp": 1})
    else:   # Qwen3 and Qwen3-MoE: full attention in every layer
        out.update({"use_sliding_window": False, "sliding_window": None, "max_window_layers": arch.layers})
    if arch.experts:
        out.update({
            "num_experts": arch.experts,
            "num_experts_per_tok": arch.experts_per_token,
            "moe_intermediate_size": arch.moe_ffn,
            "norm_topk_prob": True,          # what MindFormers trained (mindformers_config.model_config)
            "decoder_sparse_step": 1,        # every layer is MoE, as trained
            "mlp_only_layers": [],
            "router_aux_loss_coef": MOE_AUX_LOSS_COEFF,   # the coefficient it trained with
            "output_router_logits": False,
        })
    return out


def generation_config(special_ids: Dict[str, int]) -> Dict[str, Any]:
    out = {"bos_token_id": special_ids.get("bos"), "eos_token_id": special_ids.get("eos"),
           "pad_token_id": special_ids.get("pad"), "transformers_version": TRANSFORMERS_VERSION}
    return {k: v for k, v in out.items() if v is not None or k == "transformers_version"}
