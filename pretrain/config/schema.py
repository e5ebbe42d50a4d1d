"""Typed schema per config group, registered in Hydra's ConfigStore.

Each option file lists its group's schema first in `defaults`, so a typo'd key or a wrong type
fails at compose time with the key named. `???` (MISSING) marks values an option must set.
"""
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from pretrain.resilience.config import ResilienceConfig


@dataclass
class ModelConfig:
    name: str = MISSING
    arch: str = "llama"                       # llama | qwen3 (QK-norm)
    hidden_size: int = MISSING
    num_layers: int = MISSING
    num_heads: int = MISSING
    num_kv_heads: int = MISSING
    head_dim: Optional[int] = None            # None: hidden_size // num_heads
    ffn_hidden_size: int = MISSING
    vocab_size: int = MISSING
    seq_length: int = MISSING
    max_position_embeddings: int = MISSING
    rope_theta: float = 10000.0
    norm_eps: float = 1.0e-5
    tie_embeddings: bool = False
    qk_layernorm: bool = False
    # Mixture of experts: num_experts 0 means dense.
    num_experts: int = 0
    num_experts_per_token: int = 0
    moe_ffn_hidden_size: Optional[int] = None
    num_shared_experts: int = 0
    # Stability switches (Pangu Ultra): depth-scaled sandwich norm and TinyInit.
    sandwich_norm: bool = False
    init_method: str = "normal"               # normal | tiny
    init_std: float = 0.02
    # The published recipe's batch, token budget and peak LR (train.* defaults read them).
    global_batch_size: int = MISSING
    total_tokens: float = MISSING
    lr_peak: float = MISSING


@dataclass
class ParallelConfig:
    name: str = MISSING
    dp: int = 1
    tp: int = 1
    pp: int = 1
    ep: int = 1                               # experts split over ep ranks inside dp*cp
    cp: int = 1                               # context (sequence) parallel
    vpp: int = 1                              # virtual pipeline stages per pp rank
    sequence_parallel: bool = False
    zero_stage: int = 0                       # 0 none, 1 optimizer, 2 +grads, 3 +weights
    micro_batch_size: int = 1
    recompute: str = "none"                   # none | selective | full
    pipeline_schedule: str = "1f1b"           # 1f1b | zero_bubble
    pipeline_layers: Optional[List[int]] = None  # explicit uneven split, one entry per pp*vpp stage
    grad_fp32: bool = True                    # fp32 main grads (Megatron's default)


@dataclass
class LRConfig:
    peak: Optional[float] = None              # None: continue from the previous phase's final LR
    end: float = MISSING
    warmup_fraction: float = 0.0
    schedule: str = "cosine"                  # cosine | linear | constant | wsd
    wsd_decay_fraction: float = 0.2


@dataclass
class PhaseConfig:
    name: str = MISSING
    token_fraction: Optional[float] = None    # share of train.total_tokens ...
    tokens: Optional[float] = None            # ... or an absolute token budget
    mix: Dict[str, float] = field(default_factory=dict)   # prepared dataset -> weight
    lr: LRConfig = field(default_factory=LRConfig)


@dataclass
class HardwareConfig:
    name: str = MISSING
    device: str = MISSING                     # cpu | ascend
    chip: str = ""
    devices_per_node: int = 1
    num_nodes: int = 1
    memory_gb_per_device: float = MISSING
    peak_tflops: float = MISSING              # dense peak at `precision`, per device
    intra_node_gbps: float = 10.0
    inter_node_gbps: float = 10.0
    precision: str = "bf16"                   # bf16 | fp32
    failures_per_device_hour: float = 1.97e-5 # Llama 3 report: 419 interruptions / 54 days / 16k GPUs
    master_addr: str = "127.0.0.1"
    master_port: int = 8118


@dataclass
class SourceConfig:
    paths: List[str] = MISSING                # files, directories or globs (.txt .jsonl .parquet, .gz/.zst)
    text_field: str = "text"
    builtin: Optional[str] = None             # a generated sample source: general | reasoning | anneal


@dataclass
class TokenizerConfig:
    path: Optional[str] = None                # a sentencepiece .model; None: train one (train=true)
    train: bool = False
    vocab_size: int = MISSING
    model_type: str = "bpe"
    train_sentences: int = 200000             # sampled line groups (~2000 chars each) to train on
    byte_fallback: bool = True                # unknown characters as byte pieces (needs vocab > 260)


@dataclass
class CleanConfig:
    normalize: str = "NFC"
    min_chars: int = 32
    max_chars: int = 1000000                  # longer documents are split, not dropped
    max_symbol_ratio: float = 0.3
    max_repeated_line_fraction: float = 0.5


@dataclass
class DedupConfig:
    exact: bool = True
    near: bool = True
    threshold: float = 0.8
    num_perm: int = 128
    shingle: int = 5


@dataclass
class DataConfig:
    name: str = MISSING
    sources: Dict[str, SourceConfig] = field(default_factory=dict)
    cache_dir: str = MISSING                  # prepared datasets, keyed by a hash of inputs + config
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    seq_length: int = MISSING
    packing: str = "best_fit"                 # best_fit | concat
    # true: each document of a packed row attends only to itself and its positions restart
    # (MindFormers use_eod_reset + document mask); false: plain causal attention across the row
    document_mask: bool = True
    num_shards: int = 1
    val_fraction: float = 0.01
    workers: int = 2
    clean: CleanConfig = field(default_factory=CleanConfig)
    dedup: DedupConfig = field(default_factory=DedupConfig)


@dataclass
class TrainConfig:
    seed: int = 1234
    global_batch_size: int = MISSING
    grad_accum: int = MISSING
    total_tokens: float = MISSING
    lr_peak: float = MISSING
    weight_decay: float = 0.1
    adam_beta1: float = 0.9
    adam_beta2: float = 0.95
    adam_eps: float = 1.0e-8
    grad_clip: float = 1.0
    z_loss: float = 0.0
    log_every: int = 1
    eval_every: int = 50
    eval_batches: int = 4
    save_every_steps: int = 100
    save_every_minutes: float = 60.0
    keep_checkpoint_max: int = 3
    efficiency: float = 0.45


@dataclass
class PretrainConfig:
    model: ModelConfig = MISSING
    parallel: ParallelConfig = MISSING
    phase: Any = MISSING                      # one PhaseConfig, or {general: .., reasoning: .., anneal: ..}
    hardware: HardwareConfig = MISSING
    data: DataConfig = MISSING
    train: TrainConfig = field(default_factory=TrainConfig)
    resilience: ResilienceConfig = field(default_factory=ResilienceConfig)
    run_name: str = MISSING
    run_dir: str = MISSING
    dry_run: bool = False
    launcher: str = "auto"


def register() -> None:
    cs = ConfigStore.instance()
    cs.store(name="pretrain_schema", node=PretrainConfig)
    for group, node in [("model", ModelConfig), ("parallel", ParallelConfig), ("phase", PhaseConfig),
                        ("hardware", HardwareConfig), ("data", DataConfig)]:
        cs.store(group="schema", name=group, node=node)
