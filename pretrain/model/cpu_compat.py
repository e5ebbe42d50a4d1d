"""Every CPU replacement for the MindFormers Mcore training graph, in one place.

mindformers 1.9.0's `parallel_core.training_graph` is written for Ascend. On CPU it needs eight
runtime replacements, applied by `apply()` only when hardware.device == cpu, before the model is
built; Ascend runs never call this and keep MindFormers' fused kernels and flash attention:

1. core attention: FlashAttentionScore is Ascend-only -> softmax(QKᵀ/√d + mask)V (`CPUCoreAttention`).
   With document masking (data.document_mask) the mask it applies is the block-diagonal causal
   mask the step feeds as MindFormers' `attention_mask` input (pretrain/train/inputs.py), the one
   Ascend's flash attention applies from actual_seq_len.
2. `Attention._repeat_kv`: the non-flash path MindFormers falls back to assumes a [B, N, S, D]
   layout, but its caller hands it [S, B, N, D], so grouped-query attention (kv heads < heads)
   fails to compile; the replacement repeats kv heads on the right axis (query head i reads kv head
   i // rep, the convention flash attention uses, so CPU-trained weights mean the same on Ascend).
3. RoPE's `Outer` primitive has no CPU kernel -> a broadcast product (in the frequencies' dtype:
   with use_eod_reset the positions are the int32 position_ids input).
4. The vocab embedding's lookup backprops through EmbeddingDenseBackward (no CPU kernel) -> Gather.
5. The registered model classes hard-code fused RmsNorm (Ascend-only) -> MindFormers' own
   non-fused RMSNorm (`FusedNorm` builds through the module-level name, so one rebinding covers
   layer, QK and final norms).
6. MindFormers' own train step (MFTrainOneStepCell, used by its Trainer: train.engine=mindformers)
   asks mindspore.nn.TrainOneStepWithLossScaleCell.get_overflow_status, which treats every target
   that is not GPU or Ascend 910B (CPU included) as Ascend 910A and compiles NPUGetFloatStatusV2
   (mindspore/nn/wrap/loss_scale.py, _get_ascend_overflow_status_on_saturation_mode): no CPU
   kernel -> "any gradient non-finite" from all_finite, summed over the data-parallel group.
7. MoE routing: the router's top-k (`TopkExt`, parallel_core/training_graph/transformer/moe/router.py)
   has no CPU kernel -> mindspore.ops.topk (same values and indices, sorted, largest first).
8. MoE experts: `FFNGroupedGEMM` (moe/ffn.py) runs the alltoall token dispatcher (MoeTokenPermute /
   MoeTokenUnpermute) and GroupedMatmul + Swiglu inside a Morph op, all Ascend kernels ->
   `dense_experts`: every local expert on every token, each token's output the sum of its top-k
   experts' outputs weighted by the router's coefficients, the same function as the dropless
   grouped GEMM (MindFormers 1.9.0 has no capacity on this path: no token is dropped); the same
   weights [E·h, 2F] and [E·F, h] in the same layout (fc1's first F columns are the gate, as Swiglu
   splits them). It costs E/k times the routed FLOPs: a CPU proof's few experts, not a fast path.
   It also writes the step's tokens per expert into a non-trainable `expert_tokens` buffer of the
   experts cell, the per-step expert load the training loop logs (pretrain/model/moe_load.py).

The module refuses to patch a mindformers version it was not written for: the private names it
rebinds may have moved, and a silent half-patch would fail later with an unreadable graph error.
"""

import numpy as np

from pretrain.config.errors import PretrainRunError

# lazy imports (mindspore, mindformers): by design, their 3-10 s import stays out of planning and dry runs

SUPPORTED_MINDFORMERS = ("1.9.0",)

_applied = False


def check_version(installed: str) -> None:
    if installed not in SUPPORTED_MINDFORMERS:
        raise PretrainRunError(
            f"pretrain/model/cpu_compat.py was written for mindformers {', '.join(SUPPORTED_MINDFORMERS)} "
            f"but mindformers {installed} is installed: install mindformers=={SUPPORTED_MINDFORMERS[-1]} "
            f"to train on CPU (Ascend runs do not need these replacements)"
        )


def apply() -> None:
    """Install the replacements (idempotent). Call before building the model."""
    global _applied
    if _applied:
        return
    import mindformers

    check_version(mindformers.__version__)

    from mindformers.parallel_core.training_graph.base_models.common.embeddings import rotary_pos_embedding
    from mindformers.parallel_core.training_graph.base_models.gpt import gpt_layer_specs
    from mindformers.parallel_core.training_graph.tensor_parallel import layers
    from mindformers.parallel_core.training_graph.transformer import attention, norm

    cpu = _replacements()
    gpt_layer_specs.FlashAttention = cpu["CPUCoreAttention"]
    attention.Attention._repeat_kv = cpu["repeat_kv_sbnd"]
    rotary_pos_embedding.Outer = cpu["CPUOuter"]
    layers.VocabParallelEmbedding.embedding_func = cpu["gather_embedding"]
    norm.FusedRMSNorm = norm.RMSNorm
    from mindspore.nn.wrap.loss_scale import TrainOneStepWithLossScaleCell
    TrainOneStepWithLossScaleCell.get_overflow_status = cpu["overflow_status"]
    from mindformers.parallel_core.training_graph.base_models.gpt import moe_module_specs
    from mindformers.parallel_core.training_graph.transformer.moe import router

    router.TopkExt = cpu["CPUTopk"]
    moe_module_specs.FFNGroupedGEMM = cpu["CPUDenseExperts"]
    _applied = True


def _replacements():
    """Defined here so importing this module does not import mindspore; the graph compiler reads
    `ops` from this closure (it cannot compile an import statement inside a graph function)."""
    from mindspore import nn, ops
    from mindspore.common.dtype import bool_ as ms_bool, float32 as ms_float32

    class _NoShard(nn.Cell):
        # MindFormers calls .shard()/.add_prim_attr() on these while building; single-device CPU has
        # nothing to shard.
        def shard(self, *args, **kwargs):
            return self

        def add_prim_attr(self, *args, **kwargs):
            return self

    class CPUOuter(_NoShard):
        def construct(self, x, y):
            return ops.reshape(ops.cast(x, y.dtype), (-1, 1)) * ops.reshape(y, (1, -1))

    class CPUCoreAttention(_NoShard):
        """softmax(QKᵀ·scale + mask·-1e9)V on q/k/v [S, B, N, D] (kv already repeated to N heads);
        mask [B, 1, S, S] with 1 = masked, as CausalMaskGenerate makes it (or the block-diagonal
        document mask fed as attention_mask). A masked key adds -1e9: its weight is exactly 0 in
        fp32, so a document's outputs do not depend on the other documents of its row.
        Returns [S, B, N·D]."""

        def __init__(self, config, layer_number=1, **kwargs):
            super().__init__()
            self.scale = float(config.softmax_scale or config.kv_channels**-0.5)

        def construct(self, query, key, value, attention_mask=None):
            seq, batch, heads, dim = query.shape
            q = ops.transpose(query, (1, 2, 0, 3))
            k = ops.transpose(key, (1, 2, 3, 0))
            v = ops.transpose(value, (1, 2, 0, 3))
            scores = ops.matmul(q, k) * self.scale
            if attention_mask is not None:
                scores = scores + ops.cast(attention_mask, scores.dtype) * -1e9
            out = ops.transpose(ops.matmul(ops.softmax(scores, axis=-1), v), (2, 0, 1, 3))
            return ops.reshape(out, (seq, batch, heads * dim))

    def repeat_kv_sbnd(self, x, rep):
        if rep == 1:
            return x
        seq, batch, kv_heads, dim = x.shape
        x = ops.tile(ops.reshape(x, (seq, batch, kv_heads, 1, dim)), (1, 1, 1, rep, 1))
        return ops.reshape(x, (seq, batch, kv_heads * rep, dim))

    def gather_embedding(self, input_, weight):
        # VocabParallelEmbedding.embedding_func for tp=1 without sequence parallel, via Gather.
        batch, seq = input_.shape
        out = ops.gather(weight, ops.reshape(input_, (batch * seq,)), 0)
        return ops.reshape(out, (batch, seq, weight.shape[1]))

    class CPUTopk(_NoShard):
        def recompute(self, *args, **kwargs):   # the router calls the primitive's recompute(False)
            return self

        def construct(self, x, k, dim=-1, largest=True, sorted=True):
            return ops.topk(x, k, dim, largest, sorted)

    from mindspore import Parameter, Tensor
    from mindformers.parallel_core.training_graph.transformer.moe.ffn import FFNGroupedGEMM

    class CPUDenseExperts(FFNGroupedGEMM):
        """FFNGroupedGEMM's weights and init; its construct without the Ascend dispatcher and GEMM."""

        def __init__(self, config):
            super().__init__(config)
            # tokens routed to each expert (k per token), for the step's metrics
            self.expert_tokens = Parameter(Tensor(np.zeros(self.num_local_experts, np.float32)),
                                           name="expert_tokens", requires_grad=False,
                                           parallel_optimizer=False)

        def construct(self, tokens, probs, routing_map):
            """tokens [dp, N, h], probs and routing_map [dp, N, k] -> [dp, N, h]: Σ_k probs·FFN_map(x)."""
            shape, dtype = tokens.shape, tokens.dtype
            hidden, ffn_size, experts = self.hidden_size, self.moe_ffn_hidden_size, self.num_local_experts
            x = ops.cast(ops.reshape(tokens, (-1, hidden)), self.compute_dtype)
            chosen = ops.one_hot(ops.reshape(routing_map, (x.shape[0], -1)), experts,
                                 ops.ones((), ms_float32), ops.zeros((), ms_float32))   # [T, k, E]
            coeff = ops.reshape(ops.cast(probs, ms_float32), (x.shape[0], -1))
            gates = (chosen * ops.expand_dims(coeff, -1)).sum(1)                        # [T, E]
            w1 = ops.reshape(ops.cast(self.weight1, self.compute_dtype), (experts, hidden, 2 * ffn_size))
            w2 = ops.reshape(ops.cast(self.weight2, self.compute_dtype), (experts, ffn_size, hidden))
            fc1 = ops.matmul(ops.broadcast_to(ops.expand_dims(x, 0), (experts, -1, -1)), w1)   # [E, T, 2F]
            gate, up = ops.split(fc1, ffn_size, -1)
            out = ops.matmul(ops.silu(gate) * up, w2)                                       # [E, T, h]
            out = (out * ops.cast(ops.expand_dims(ops.transpose(gates, (1, 0)), -1), out.dtype)).sum(0)
            # summed over the step's micro-batches; pretrain/model/moe_load.py zeroes it per step
            out = ops.depend(out, ops.assign_add(self.expert_tokens, ops.stop_gradient(chosen.sum((0, 1)))))
            return ops.cast(ops.reshape(out, shape), dtype)

    from mindspore.amp import all_finite

    def overflow_status(self, status, compute_output):
        overflow = ops.logical_not(all_finite(compute_output))
        if self.is_distributed:   # any rank's overflow skips the step on every rank
            overflow = ops.cast(self.allreduce(ops.cast(overflow, ms_float32)), ms_bool)
        return overflow

    return {
        "overflow_status": overflow_status,
        "CPUOuter": CPUOuter,
        "CPUCoreAttention": CPUCoreAttention,
        "repeat_kv_sbnd": repeat_kv_sbnd,
        "gather_embedding": gather_embedding,
        "CPUTopk": CPUTopk,
        "CPUDenseExperts": CPUDenseExperts,
    }
