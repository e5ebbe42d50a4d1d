"""Our composed config -> the config MindFormers itself reads (pure Python, no mindspore import).

`model_config(cfg)` is the `model.model_config` block that MindFormers' `build_network` turns into
its registered Mcore training model; the trainer builds from exactly this block, so the exported
run_dir/mindformers.yaml and the trained model cannot drift apart. `export(cfg, ...)` adds the
other top-level sections MindFormers' own run script reads (context, parallel, parallel_config,
optimizer, lr_schedule, runner_config, runner_wrapper, train_dataset, recompute_config, callbacks).

Which registered MindFormers 1.9.0 class trains which of our architectures:
- arch=qwen3 -> Qwen3ForCausalLM (TrainingQwen3ForCausalLM: QK-norm hard-wired on; ties the head
  when tie_word_embeddings), or Qwen3MoeForCausalLM when model.num_experts > 0.
- sandwich_norm -> PanguUltraForCausalLM (ours, pretrain/model/sandwich.py): TeleChat3's model with
  Pangu Ultra's depth-scaled sandwich-norm layers (arch=llama only: validate.py).
- arch=llama -> TeleChat3ForCausalLM: MindFormers' generic dense Mcore decoder (RMSNorm, RoPE, GQA,
  SwiGLU, no biases) whose qk_layernorm follows the config, so with qk_layernorm=False it is the
  Llama layout; it also builds MoE layers from num_experts. It never ties the head.
"""

import math
from typing import Any, Dict, List, Optional

from omegaconf import DictConfig, OmegaConf

from pretrain.config.attention import document_attention
from pretrain.config.layout import ParallelLayout
from pretrain.config.lr_levels import end_lr

MOE_AUX_LOSS_COEFF = 0.001   # Qwen3-MoE's router_aux_loss_coef (Hugging Face config)
SANDWICH_ARCHITECTURE = "PanguUltraForCausalLM"   # pretrain/model/sandwich.py registers it
# (model_type, architecture) per (arch, moe)
_CLASSES = {
    ("llama", False): ("telechat3", "TeleChat3ForCausalLM"),
    ("llama", True): ("telechat3", "TeleChat3ForCausalLM"),
    ("qwen3", False): ("qwen3", "Qwen3ForCausalLM"),
    ("qwen3", True): ("qwen3_moe", "Qwen3MoeForCausalLM"),
}
# train_dataset's base columns, named as the Mcore model's construct() takes them: what our loader
# makes of the shards' input_ids (seq+1 tokens) and seg_lens (pretrain/data/loader.py), plus the
# document-attention inputs of input_columns()
INPUT_COLUMNS = ("input_ids", "labels", "loss_mask")
_LR_SCHEDULES = {
    "cosine": "CosineWithWarmUpLR",
    "linear": "LinearWithWarmUpLR",
    "constant": "ConstantWarmUpLR",
    "wsd": "WarmUpStableDecayLR",
}


def tiny_init_std(hidden: int, layers: int) -> float:
    """Pangu Ultra's TinyInit: std = sqrt(1 / (2 · hidden · layers))."""
    return math.sqrt(1.0 / (2.0 * hidden * layers))


def init_std(model: Any) -> float:
    if model.init_method == "tiny":
        return tiny_init_std(int(model.hidden_size), int(model.num_layers))
    return float(model.init_std)


def model_class(model: Any) -> tuple:
    """(model_type, architecture) of the registered MindFormers class that trains `model` (the
    combinations it cannot train are refused by pretrain/config/validate.py). With sandwich_norm it
    is our PanguUltraForCausalLM (pretrain/model/sandwich.py): TeleChat3's config and decoder with
    DSSN layers, registered with MindFormers by pretrain.model.sandwich.register()."""
    if model.sandwich_norm:
        return ("telechat3", SANDWICH_ARCHITECTURE)
    return _CLASSES[(str(model.arch), int(model.num_experts or 0) > 0)]


def input_columns(cfg: DictConfig) -> List[str]:
    """The model's inputs (MindFormers construct argument names) that train_dataset provides."""
    mode = document_attention(cfg)
    if mode == "off":
        return list(INPUT_COLUMNS)
    return [*INPUT_COLUMNS, "position_ids", "actual_seq_len" if mode == "compressed" else "attention_mask"]


def model_config(cfg: DictConfig, pad_token_id: int = 0) -> Dict[str, Any]:
    """The `model.model_config` block for cfg.model on cfg.hardware (Hugging Face key names, plus
    the MindFormers keys its config converter maps onto TransformerConfig)."""
    m, hw = cfg.model, cfg.hardware
    model_type, architecture = model_class(m)
    on_cpu = hw.device == "cpu"
    std = init_std(m)
    block: Dict[str, Any] = {
        "model_type": model_type,
        "architectures": [architecture],
        "vocab_size": int(m.vocab_size),
        "hidden_size": int(m.hidden_size),
        "intermediate_size": int(m.ffn_hidden_size),
        "num_hidden_layers": int(m.num_layers),
        "num_attention_heads": int(m.num_heads),
        "num_key_value_heads": int(m.num_kv_heads),
        "head_dim": int(m.head_dim or m.hidden_size // m.num_heads),
        "max_position_embeddings": int(m.max_position_embeddings),
        "seq_length": int(m.seq_length),
        "rope_theta": float(m.rope_theta),
        "rms_norm_eps": float(m.norm_eps),
        "normalization": "RMSNorm",
        "hidden_act": "silu",
        "gated_linear_unit": True,
        "add_bias_linear": False,
        "attention_bias": False,
        "position_embedding_type": "rope",
        "qk_layernorm": bool(m.qk_layernorm),
        "tie_word_embeddings": bool(m.tie_embeddings),
        "initializer_range": std,
        "hidden_dropout": 0.0,
        "attention_dropout": 0.0,
        "pad_token_id": int(pad_token_id),
        "use_contiguous_weight_layout_attention": False,
        # Flash attention and bf16 compute are Ascend's; the CPU graph runs fp32 without them.
        "use_flash_attention": not on_cpu,
        "params_dtype": "float32",
        "compute_dtype": "bfloat16" if hw.precision == "bf16" else "float32",
        "layernorm_compute_dtype": "float32",
        "softmax_compute_dtype": "float32",
        "rotary_dtype": "float32",
        # Loss = sum over valid tokens / their count over the whole global batch: the model returns
        # (numerator, denominator) and the step divides after accumulation and the all-reduce.
        "calculate_per_token_loss": True,
    }
    mode = document_attention(cfg)
    if mode != "off":
        block["use_eod_reset"] = True  # RoPE positions from position_ids, restarting per document
    if mode == "compressed":
        block["use_eod_attn_mask_compression"] = True
    if m.init_method == "tiny":
        # MindFormers (like Megatron) scales the output projections' std by 1/sqrt(2·layers) on top
        # of init_method_std; TinyInit uses the one std everywhere, so pin those weights to it too.
        block["param_init_std_rules"] = [
            {"target": r".*\.(linear_proj|linear_fc2)\.weight", "init_method_std": std}
        ]
    if int(m.num_experts or 0) > 0:
        block.update(
            {
                "num_experts": int(m.num_experts),
                "num_experts_per_tok": int(m.num_experts_per_token),
                "moe_intermediate_size": int(m.moe_ffn_hidden_size or m.ffn_hidden_size),
                "moe_grouped_gemm": True,  # MindFormers 1.9.0 implements only the grouped GEMM path
                "norm_topk_prob": True,  # top-k gate weights renormalised to sum to 1 (Qwen3-MoE)
                "routed_scaling_factor": 1.0,
                "router_dense_type": "float32",
                # the load-balancing loss in the objective: Qwen3-MoE's router_aux_loss_coef (0.001),
                # a key MindFormers' Qwen3-MoE config marks unused; its own key is this one (default 0)
                "moe_aux_loss_coeff": MOE_AUX_LOSS_COEFF,
            }
        )
        if int(m.num_shared_experts or 0) > 0:
            block["n_shared_experts"] = int(m.num_shared_experts)
            block["moe_shared_expert_intermediate_size"] = int(m.num_shared_experts) * int(
                m.moe_ffn_hidden_size or m.ffn_hidden_size
            )
    if m.sandwich_norm:
        # MindFormers' own switch (its inference specs read it); the training graph gets DSSN from
        # the architecture (model_class), so both of MindFormers' graphs agree on the model
        block["sandwich_norm"] = True
    block.update(model_parallel_keys(cfg))
    return block


def context_block(cfg: DictConfig) -> Dict[str, Any]:
    hw = cfg.hardware
    if hw.device == "cpu":
        return {"mode": 0, "device_target": "CPU"}
    return {
        "mode": 0,
        "device_target": "Ascend",
        "max_device_memory": f"{max(int(hw.memory_gb_per_device) - 6, 1)}GB",
        "jit_config": {"jit_level": "O0"},
        "ascend_config": {"precision_mode": "must_keep_origin_dtype"},
    }


def is_semi_auto(cfg: DictConfig) -> bool:
    """MindSpore's SEMI_AUTO_PARALLEL mode rather than DATA_PARALLEL (ParallelLayout.semi_auto says why)."""
    return ParallelLayout.from_config(cfg).semi_auto


def pipeline_offset(cfg: DictConfig) -> Any:
    """MindFormers' `offset`: layers of each pipeline stage beyond num_layers // (pp · vpp); a list
    over pp, or a [vpp][pp] list of lists with the interleaved schedule (virtual stage v of rank r
    is parallel.pipeline_layers[v · pp + r], the planner's order)."""
    p, layers = cfg.parallel, int(cfg.model.num_layers)
    pp, vpp = int(p.pp), int(p.vpp)
    if p.pipeline_layers is None:
        return 0 if vpp == 1 else [[0] * pp for _ in range(vpp)]
    base = layers // (pp * vpp)
    rows = [[int(p.pipeline_layers[v * pp + r]) - base for r in range(pp)] for v in range(vpp)]
    return rows[0] if vpp == 1 else rows


def model_parallel_keys(cfg: DictConfig) -> Dict[str, Any]:
    """The parallel settings MindFormers reads from model.model_config rather than parallel_config:
    the per-stage layer split (offset), virtual pipeline chunks (pp_interleave_num), and lazy
    inline, which MindFormers' trainer switches off unless semi-auto parallel runs a pipeline or
    gradient accumulation (and which the Mcore model needs off under data parallel on CPU)."""
    p = cfg.parallel
    keys: Dict[str, Any] = {
        "disable_lazy_inline": not is_semi_auto(cfg) or (int(p.pp) == 1 and int(cfg.train.grad_accum) == 1)
    }
    if int(p.pp) > 1:
        keys["offset"] = pipeline_offset(cfg)
    if int(p.vpp) > 1:
        keys["pp_interleave_num"] = int(p.vpp)
    return keys


def parallel_blocks(cfg: DictConfig) -> Dict[str, Any]:
    """`use_parallel`, `parallel` (MindSpore's auto-parallel context, set as is by MindFormers'
    ParallelOperator), `parallel_config` (TransformerOpParallelConfig), `recompute_config` and
    `micro_batch_interleave_num`, the way MindFormers' own pretraining yamls spell them."""
    p, lay = cfg.parallel, ParallelLayout.from_config(cfg)
    dp, tp, pp, cp, ep, vpp = lay.dp, lay.tp, lay.pp, lay.cp, lay.ep, lay.vpp
    zero = lay.zero_stage
    semi = lay.semi_auto
    parallel: Dict[str, Any] = {
        "parallel_mode": 1 if semi else 0,
        # DATA_PARALLEL: the gradient all-reduce averages over dp; semi-auto: the loss is already
        # the mean over the global batch, so its gradients are summed.
        "gradients_mean": not semi,
        "full_batch": False,  # every data-parallel group reads its own share of the batch
        "enable_alltoall": ep > 1,  # MoE token dispatch
        # ZeRO: MindSpore's optimizer parallel shards over each parameter's data-parallel group;
        # its level N shards what ZeRO stage N does (1: optimizer states, 2: + gradients, 3: + weights).
        "enable_parallel_optimizer": lay.sharded_optimizer,
    }
    if parallel["enable_parallel_optimizer"]:
        parallel["parallel_optimizer_config"] = {
            "optimizer_level": f"level{zero}",
            "parallel_optimizer_threshold": 64,  # KB: tiny tensors (norm gains) stay whole
            "optimizer_weight_shard_size": -1,  # the whole data-parallel group
        }
    if semi:
        parallel["search_mode"] = "sharding_propagation"
        parallel["strategy_ckpt_config"] = {"save_file": "./ckpt_strategy.ckpt", "only_trainable_params": False}
        # per train_dataset input column: batch split over dp, sequences (and masks) whole
        parallel["dataset_strategy"] = [
            [dp, 1, 1, 1] if c == "attention_mask" else [dp, 1] for c in input_columns(cfg)
        ]
    if vpp > 1 or p.pipeline_schedule == "zero_bubble":   # zero_bubble is ZB-V: vpp=2 (validate.py)
        parallel["pipeline_config"] = {
            "pipeline_interleave": True,
            "pipeline_scheduler": "zero_bubble_v" if p.pipeline_schedule == "zero_bubble" else "1f1b",
        }
    parallel_config = {
        "data_parallel": dp,
        "model_parallel": tp,
        "pipeline_stage": pp,
        "context_parallel": cp,
        "expert_parallel": ep,
        # MindFormers: global batch = batch_size · dp · micro_batch_num with a pipeline, else
        # batch_size · dp · gradient_accumulation_steps; both are our train.grad_accum.
        "micro_batch_num": int(cfg.train.grad_accum) if pp > 1 else 1,
        "use_seq_parallel": bool(p.sequence_parallel),
        "vocab_emb_dp": False,  # the embedding and head are split over tp (the planner's Φ)
        "gradient_aggregation_group": 4,
    }
    recompute = {
        "recompute": p.recompute == "full",
        "select_recompute": p.recompute == "selective",
        "parallel_optimizer_comm_recompute": False,
        "mp_comm_recompute": True,
    }
    return {
        "use_parallel": lay.world_size > 1,
        "parallel": parallel,
        "parallel_config": parallel_config,
        "recompute_config": recompute,
        "micro_batch_interleave_num": 1,
    }


def lr_schedule_block(phase: Any, steps: int, peak: float) -> Dict[str, Any]:
    """One phase's schedule as MindFormers' own LR class (our schedule.py is the one that trains;
    this is its MindFormers spelling for a user who runs the yaml with MindFormers' trainer)."""
    kind = str(phase.lr.schedule)
    block = {
        "type": _LR_SCHEDULES[kind],
        "learning_rate": float(peak),
        "warmup_steps": int(round(float(phase.lr.warmup_fraction) * steps)),
        "total_steps": int(steps),
    }
    if kind != "constant":
        block["lr_end"] = end_lr(phase.lr, peak)
    if kind == "wsd":
        # MindFormers counts the decay from the phase's start: it begins at round(steps x (1 - fraction)).
        # Ours (schedule.lr_at, and PretrainPhaseLR, which MindFormers' trainer runs from the per-phase
        # yamls) decays over the last round(fraction x (steps - warmup)) steps: with warmup the two
        # starts differ by about fraction x warmup steps. This block only spells the schedule for
        # MindFormers' own trainer; nothing here trains with it.
        block["decay_start_steps"] = int(round(steps * (1.0 - float(phase.lr.wsd_decay_fraction))))
    return block


def export(
    cfg: DictConfig,
    *,
    first_phase: Any,
    first_phase_steps: int,
    first_phase_peak: float,
    train_files: Optional[List[str]] = None,
    pad_token_id: int = 0,
    run_dir: Optional[str] = None,
    phase_name: Optional[str] = None,
) -> Dict[str, Any]:
    """The whole mindformers.yaml as a dict. The lr_schedule is the first phase this run trains:
    MindFormers' trainer has one schedule per run, so each later phase is its own MindFormers run."""
    t, p = cfg.train, cfg.parallel
    out: Dict[str, Any] = {
        "seed": int(t.seed),
        "run_mode": "train",
        # MindFormers' trainer hands this to the model and its wrapper (GradAccumulationCellWithTwoOutput)
        "calculate_per_token_loss": True,
        "use_legacy": False,
        "output_dir": "./output",
        "load_checkpoint": "",
        "load_ckpt_format": "safetensors",
        "resume_training": False,
        "trainer": {"type": "CausalLanguageModelingTrainer", "model_name": str(cfg.model.name)},
        "runner_config": {
            "epochs": 1,
            "batch_size": int(p.micro_batch_size),
            # Ascend sinks one step per call; CPU has no dataset sink, and with sink_mode MindSpore's
            # Model.train would run the whole dataset per "sink" (epochs x dataset steps)
            "sink_mode": cfg.hardware.device != "cpu",
            "sink_size": 1,
            "gradient_accumulation_steps": int(t.grad_accum) if int(p.pp) == 1 else 1,
        },
        "runner_wrapper": {
            "type": "MFTrainOneStepCell",
            "use_clip_grad": True,
            "max_grad_norm": float(t.grad_clip),
            "scale_sense": 1.0
            if cfg.hardware.device == "cpu"
            else {
                "type": "DynamicLossScaleUpdateCell",
                "loss_scale_value": 65536,
                "scale_factor": 2,
                "scale_window": 1000,
            },
        },
        "optimizer": {
            "type": "AdamW",
            "betas": [float(t.adam_beta1), float(t.adam_beta2)],
            "eps": float(t.adam_eps),
            "weight_decay": float(t.weight_decay),
        },
        "lr_schedule": lr_schedule_block(first_phase, first_phase_steps, first_phase_peak),
        "train_dataset": train_dataset_block(cfg, run_dir, phase_name or str(first_phase.name), train_files),
        "context": context_block(cfg),
        **parallel_blocks(cfg),
        "model": {"model_config": model_config(cfg, pad_token_id=pad_token_id)},
        "callbacks": [
            {"type": "MFLossMonitor"},
            {
                "type": "CheckpointMonitor",
                "prefix": str(cfg.model.name),
                "save_checkpoint_steps": int(t.save_every_steps),
                "keep_checkpoint_max": int(t.keep_checkpoint_max),
                "checkpoint_format": "safetensors",
            },
        ],
    }
    out["train_dataset_task"] = {"type": "CausalLanguageModelDataset", "dataset_config": out["train_dataset"]}
    return out


def train_dataset_block(cfg: DictConfig, run_dir: Optional[str], phase_name: str,
                        train_files: Optional[List[str]] = None) -> Dict[str, Any]:
    """MindFormers' train_dataset for one phase: our MindRecord shards as written (columns input_ids
    and seg_lens), read through our loader registered as MindFormers' `PretrainShardLoader`
    (pretrain/engine/dataset.py), so MindFormers' dataset builder yields, step by step, the batches
    our loop trains on (the phase's mixture, seed and data-parallel shard). MindFormers batches them
    by micro_batch_size and casts input_ids/labels to int32."""
    return {
        "data_loader": {
            "type": "PretrainShardLoader",
            "run_dir": str(run_dir or cfg.run_dir),   # the frozen config.yaml names the prepared data
            "phase": phase_name,
            "dataset_files": list(train_files or []),  # informational: the loader reads them via the config
        },
        "input_columns": input_columns(cfg),
        "construct_args_key": input_columns(cfg),
        "batch_size": int(cfg.parallel.micro_batch_size),
        "drop_remainder": True,
        "num_parallel_workers": 1,   # a row's content is fixed by (seed, step): no parallel reader needed
        "python_multiprocessing": False,
        "seed": int(cfg.train.seed),
    }


def to_yaml(exported: Dict[str, Any]) -> str:
    header = (
        "# MindFormers config of this run, written by pretrain (pretrain/model/mindformers_config.py).\n"
        "# MindFormerConfig loads it; build_network(config.model) builds the model pretrain trains.\n"
    )
    return header + OmegaConf.to_yaml(OmegaConf.create(exported))
