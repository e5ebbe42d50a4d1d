"""Pangu Ultra's depth-scaled sandwich norm (DSSN) on MindFormers' own Mcore training graph.

Pangu Ultra (arXiv 2504.07866, §2.2) wraps each sub-layer's output in a second norm whose scale
starts small and shrinks with depth:

    h' = h  + Norm_{γ_attn}(ATTN(Norm(h)))
    h  = h' + Norm_{γ_mlp}(FFN(Norm(h')))
    γ_attn = c_attn / √L,  γ_mlp = c_mlp / √L           (L = number of layers)

with c_attn, c_mlp the initial output standard deviations of the attention and FFN sub-layers;
for Pangu Ultra c_attn = 0.283, c_mlp = 0.432 (the constants below). The paper pairs it with
TinyInit (§2.3): every weight drawn with std = √(1 / (2·d·L)) (d hidden size), which
mindformers_config.tiny_init_std gives and init_std_rules pins on every weight.

MindFormers 1.9.0's training-graph `TransformerLayer` has no post-sub-layer norm (only its
inference graph's specs do), so `SandwichTransformerLayer` subclasses it: the parent builds the
pre-norms, attention and MLP (and shards them); this class adds `post_self_attn_layernorm` and
`post_mlp_layernorm`, built from the same norm spec as the input norm (so on CPU they are the
non-fused RMSNorm cpu_compat installs, on Ascend the fused one), and its construct inserts them.
`PanguUltraForCausalLM` is a registered MindFormers model class (TeleChat3's config and training
model, its dense decoder with this layer), so MindFormers' own `build_network` builds it from the
exported `architectures: [PanguUltraForCausalLM]`; `register()` makes the name known and runs
wherever a model is built (pretrain.model.builder, pretrain.engine.mindformers).
"""

import math

from pretrain.model.mindformers_config import SANDWICH_ARCHITECTURE as ARCHITECTURE

# lazy imports (mindspore, mindformers): by design, their 3-10 s import stays out of planning and dry runs

# Pangu Ultra §2.2: "c_attn and c_mlp are set as the initial output standard deviations of the
# attention layer and FFN layer ... For Pangu Ultra, we set c_attn to 0.283 and c_mlp to 0.432."
C_ATTN = 0.283
C_MLP = 0.432


def post_norm_scales(num_layers: int) -> tuple:
    """(γ_attn, γ_mlp) = (c_attn / √L, c_mlp / √L): the initial scale of every layer's two post-norms."""
    return C_ATTN / math.sqrt(num_layers), C_MLP / math.sqrt(num_layers)


_registered = False


def register() -> None:
    """Register PanguUltraForCausalLM with MindFormers (idempotent; imports mindformers)."""
    global _registered
    if _registered:
        return
    from mindformers.tools.register import MindFormerModuleType, MindFormerRegister

    classes = _classes()
    MindFormerRegister.register_cls(classes[ARCHITECTURE], module_type=MindFormerModuleType.MODELS,
                                    legacy=False)
    globals().update(classes)
    _registered = True


def _classes():
    """Defined on first use so importing this module imports neither mindspore nor mindformers."""
    from mindspore.common.initializer import Constant, initializer

    from mindformers.models.telechat3.modeling_telechat3_train import TrainingTeleChat3ForCausalLM
    from mindformers.models.telechat3.utils import TeleChat3PreTrainedModel
    from mindformers.parallel_core.training_graph.base_models.gpt.gpt_layer_specs import (
        get_gpt_decoder_block_spec, get_gpt_layer_local_spec)
    from mindformers.parallel_core.training_graph.base_models.gpt.gpt_model import GPTModel
    from mindformers.parallel_core.training_graph.device_matrix import layout
    from mindformers.parallel_core.training_graph.transformer.transformer_block import (
        TransformerBlockSubmodules)
    from mindformers.parallel_core.training_graph.transformer.transformer_layer import TransformerLayer
    from mindformers.parallel_core.utils.spec_utils import ModuleSpec, build_module

    class SandwichTransformerLayer(TransformerLayer):
        """MindFormers' TransformerLayer plus DSSN's post-attention and post-MLP norms:
        out = h' + PostNorm_mlp(MLP(PreNorm(h'))), h' = h + PostNorm_attn(ATTN(InNorm(h)))."""

        def __init__(self, config, submodules, layer_number=1, hidden_dropout=None,
                     post_norm_scales=(1.0, 1.0)):
            if config.multi_latent_attention or config.apply_residual_connection_post_layernorm:
                raise ValueError("SandwichTransformerLayer: DSSN is built for the pre-norm residual "
                                 "layout with standard attention (no MLA, no "
                                 "apply_residual_connection_post_layernorm)")
            super().__init__(config, submodules, layer_number=layer_number, hidden_dropout=hidden_dropout)
            self.post_self_attn_layernorm = self._post_norm(config, submodules, post_norm_scales[0])
            self.post_mlp_layernorm = self._post_norm(config, submodules, post_norm_scales[1])
            if self.sequence_parallel or (config.context_parallel_size or 1) > 1:
                # sub-layer outputs are split over sequence (cp·tp) like the layer input: the
                # parent shards its input norm this way, the post-norms follow it
                for norm in (self.post_self_attn_layernorm, self.post_mlp_layernorm):
                    norm.shard(config, in_strategy=(layout("cp_tp", "dp", "None"), layout("None",)))
            # else: each norm's own shard() (called in its __init__) splits [S, B, H] as (cp, dp, 1)

        @staticmethod
        def _post_norm(config, submodules, gamma):
            norm = build_module(submodules.input_layernorm, config=config, dim=config.hidden_size,
                                eps=config.layernorm_epsilon)
            # DSSN: γ = c / √L instead of ones
            norm.weight.set_data(initializer(Constant(gamma), norm.weight.shape, norm.weight.dtype))
            return norm

        def construct(self, hidden_states, attention_mask=None, context=None, context_mask=None,
                      rotary_pos_emb=None, prefix_keys_values=None, extra_loss=0., actual_seq_len=None,
                      sharded_key=None, sharded_value=None, attention_loss=0.):
            residual = hidden_states
            attention_output = self.self_attention(
                self.input_layernorm(hidden_states),
                attention_mask=attention_mask,
                rotary_pos_emb=rotary_pos_emb,
                prefix_keys_values=prefix_keys_values,
                actual_seq_len=actual_seq_len,
            )
            bias = None
            if isinstance(attention_output, tuple):
                attention_output, bias = attention_output
            if bias is not None:
                attention_output = self.add_bias(attention_output, bias)
            attention_output = self.post_self_attn_layernorm(attention_output)
            hidden = self.add(residual, self.hidden_states_dropout(attention_output))

            mlp_output, mlp_bias, extra_loss = self.mlp(self.pre_mlp_layernorm(hidden), extra_loss=extra_loss)
            if mlp_bias is not None:
                mlp_output = self.add_bias(mlp_output, mlp_bias)
            mlp_output = self.post_mlp_layernorm(mlp_output)
            output = self.add(hidden, self.hidden_states_dropout(mlp_output))
            output = self.cast(output, self.compute_dtype)
            return output, context, extra_loss, attention_loss

    def sandwich_spec(spec, scales):
        """A layer spec (or block of them) with MindFormers' TransformerLayer swapped for ours."""
        if isinstance(spec, TransformerBlockSubmodules):
            return TransformerBlockSubmodules(
                layer_specs=[sandwich_spec(s, scales) for s in spec.layer_specs], layer_norm=spec.layer_norm)
        return ModuleSpec(module=SandwichTransformerLayer, params={**spec.params, "post_norm_scales": scales},
                          submodules=spec.submodules)

    class TrainingPanguUltraForCausalLM(TrainingTeleChat3ForCausalLM):
        """TeleChat3's training model (MindFormers' generic dense Mcore decoder) with DSSN layers;
        construct and the rest are TeleChat3's."""

        def __init__(self, config):
            # the parent's __init__ would build GPTModel with the plain layer: start from its base
            TeleChat3PreTrainedModel.__init__(self, config, auto_prefix=False)
            tc = self.convert_to_transformer_config(config, is_mla_model=False)
            if tc.num_moe_experts:
                base = get_gpt_decoder_block_spec(tc)
            else:
                base = get_gpt_layer_local_spec(
                    qk_layernorm=tc.qk_layernorm,
                    use_contiguous_weight_layout_attention=tc.use_contiguous_weight_layout_attention,
                    use_interleaved_weight_layout_mlp=tc.use_interleaved_weight_layout_mlp,
                )
            self.model = GPTModel(
                config=tc,
                transformer_layer_spec=sandwich_spec(base, post_norm_scales(tc.num_layers)),
                vocab_size=tc.vocab_size,
                max_sequence_length=tc.max_position_embeddings,
                position_embedding_type=tc.position_embedding_type,
                rotary_percent=1.0,
                rotary_base=tc.rotary_base,
                rope_scaling=False,
            )

    class PanguUltraForCausalLM:
        """The registered name (MindFormers builds models by `architectures[0]`)."""

        def __new__(cls, config, *args, **kwargs):
            return TrainingPanguUltraForCausalLM(config=config)

    return {
        "SandwichTransformerLayer": SandwichTransformerLayer,
        "TrainingPanguUltraForCausalLM": TrainingPanguUltraForCausalLM,
        "PanguUltraForCausalLM": PanguUltraForCausalLM,
        "sandwich_spec": sandwich_spec,
    }
