"""Typed schema per config group, registered in Hydra's ConfigStore.

Each option file lists its group's schema first in `defaults`, so a typo'd key or a wrong type
fails at compose time with the key named. `???` (MISSING) marks values an option must set.
"""
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from omegaconf import MISSING

from pretrain.config.ranges import between, derived
from pretrain.config.resilience import ResilienceConfig

K, M = 2**10, 2**20


@dataclass
class ModelConfig:
    name: str = MISSING
    arch: str = "llama"                       # llama | qwen3 (QK-norm)
    hidden_size: int = between(1, M)
    num_layers: int = between(1, 10 * K)
    num_heads: int = between(1, 64 * K)
    num_kv_heads: int = between(1, 64 * K)
    head_dim: Optional[int] = between(1, 64 * K, None)   # None: hidden_size // num_heads
    ffn_hidden_size: int = between(1, 16 * M)
    vocab_size: int = between(8, 16 * M)
    seq_length: int = between(2, 16 * M)
    max_position_embeddings: int = between(2, 16 * M)
    rope_theta: float = between(0.0, 1e12, 10000.0, low_open=True)
    norm_eps: float = between(0.0, 0.1, 1.0e-5, low_open=True)
    tie_embeddings: bool = False
    qk_layernorm: bool = False
    # Mixture of experts: num_experts 0 means dense.
    num_experts: int = between(0, 64 * K, 0)
    num_experts_per_token: int = between(0, 64 * K, 0)
    moe_ffn_hidden_size: Optional[int] = between(1, 16 * M, None)
    num_shared_experts: int = between(0, K, 0)
    # Stability switches (Pangu Ultra): depth-scaled sandwich norm and TinyInit.
    sandwich_norm: bool = False
    init_method: str = "normal"               # normal | tiny
    init_std: float = between(0.0, 1.0, 0.02, low_open=True)
    # The published recipe's batch, token budget and peak LR (train.* defaults read them).
    global_batch_size: int = between(1, 16 * M)
    total_tokens: float = between(0.0, 1e15, low_open=True)
    lr_peak: float = between(0.0, 1.0, low_open=True)


@dataclass
class ParallelConfig:
    name: str = MISSING
    dp: int = between(1, M, 1)
    tp: int = between(1, K, 1)
    pp: int = between(1, K, 1)
    ep: int = between(1, 64 * K, 1)           # experts split over ep ranks inside dp*cp
    cp: int = between(1, K, 1)                # context (sequence) parallel
    vpp: int = between(1, 64, 1)              # virtual pipeline stages per pp rank
    sequence_parallel: bool = False
    zero_stage: int = between(0, 3, 0)        # 0 none, 1 optimizer, 2 +grads, 3 +weights
    micro_batch_size: int = between(1, 64 * K, 1)
    recompute: str = "none"                   # none | selective | full
    pipeline_schedule: str = "1f1b"           # 1f1b | zero_bubble
    pipeline_layers: Optional[List[int]] = None  # explicit uneven split, one entry per pp*vpp stage
    grad_fp32: bool = True                    # fp32 main grads (Megatron's default)


@dataclass
class LRConfig:
    peak: Optional[float] = between(0.0, 1.0, None, low_open=True)  # None: continue from the previous phase's final LR
    end: Optional[float] = between(0.0, 1.0, None)   # the LR the phase decays to; None: peak x end_ratio
    end_ratio: float = between(0.0, 1.0, 0.1)        # end relative to the phase's own peak (continuing: its start)
    warmup_fraction: float = between(0.0, 1.0, 0.0, high_open=True)
    schedule: str = "cosine"                  # cosine | linear | constant | wsd
    wsd_decay_fraction: float = between(0.0, 1.0, 0.2, low_open=True)


@dataclass
class PhaseConfig:
    name: str = MISSING
    token_fraction: Optional[float] = between(0.0, 1.0, None, low_open=True)  # share of train.total_tokens ...
    tokens: Optional[float] = between(0.0, 1e15, None, low_open=True)         # ... or an absolute budget
    mix: Dict[str, float] = field(default_factory=dict)   # prepared dataset -> weight
    lr: LRConfig = field(default_factory=LRConfig)


@dataclass
class HardwareConfig:
    name: str = MISSING
    device: str = MISSING                     # cpu | ascend
    chip: str = ""
    devices_per_node: int = between(1, K, 1)
    num_nodes: int = between(1, 100_000, 1)
    memory_gb_per_device: float = between(0.0, 100_000.0, low_open=True)
    peak_tflops: float = between(0.0, 100_000.0, low_open=True)   # dense peak at `precision`, per device
    intra_node_gbps: float = between(0.0, 1e6, 10.0, low_open=True)
    inter_node_gbps: float = between(0.0, 1e6, 10.0, low_open=True)
    precision: str = "bf16"                   # bf16 | fp32
    failures_per_device_hour: float = between(0.0, 1.0, 1.97e-5)  # Llama 3: 419 interruptions / 54 days / 16k GPUs
    master_addr: str = "127.0.0.1"
    master_port: int = between(1, 65535, 8118)
    min_devices: int = between(1, 2**30, 1)   # resilience.elastic never shrinks the job below this
    # One node's aggregate checkpoint write bandwidth: every rank writes its own shard, so a node writes
    # devices_per_node shards at once. 2 GB/s is a conservative figure for a parallel file system seen
    # from one node; measure yours (python -m pretrain.bench.resilience times a save).
    checkpoint_write_gbps: float = between(0.0, 1e6, 2.0, low_open=True)
    # A CPU process holds MindSpore's runtime and, per training graph it compiled, an unfused multiple
    # of the planned activations: what the plan assumes for it until a calibration measures it.
    runtime_gb: float = between(0.0, 1e4, 0.0)
    graph_activation_multiple: float = between(1.0, 1e3, 1.0)
    # every node on this host, each in a network namespace of its own, under the job controller
    # (pretrain/launch/controller.py): a cluster stand-in for tests (needs root)
    nodes_on_this_host: bool = False


@dataclass
class SourceConfig:
    paths: List[str] = MISSING                # files, directories or globs (.txt .jsonl .parquet, .gz/.zst)
    text_field: str = "text"
    builtin: Optional[str] = None             # a generated sample source: general | reasoning | anneal
    encoding: Optional[str] = None            # of the files that are not UTF-8 (e.g. gb18030); None: refused


@dataclass
class TokenizerConfig:
    path: Optional[str] = None                # a sentencepiece .model; None: train one (train=true)
    train: bool = False
    vocab_size: int = between(8, 16 * M)
    model_type: str = "bpe"
    train_sentences: int = between(1, 10**9, 200000)   # sampled line groups (~2000 chars each) to train on
    byte_fallback: bool = True                # unknown characters as byte pieces (needs vocab > 260)
    # share of the training text's characters that must be pieces of their own (the rarest rest: bytes);
    # sentencepiece's value for Chinese/Japanese, which keeps the common Han characters whole
    character_coverage: float = between(0.0, 1.0, 0.9995, low_open=True)


@dataclass
class CleanConfig:
    normalize: str = "NFC"
    min_chars: int = between(0, 10**9, 32)
    max_chars: int = between(1, 10**12, 1000000)   # longer documents are split, not dropped
    max_symbol_ratio: float = between(0.0, 1.0, 0.3)
    max_repeated_line_fraction: float = between(0.0, 1.0, 0.5)


@dataclass
class DedupConfig:
    exact: bool = True
    near: bool = True
    # near: estimated Jaccard similarity of the sets of `shingle`-unit shingles from which a document is a
    # near duplicate; a unit is a word, or a character of a script written without spaces (Chinese,
    # Japanese, Thai: pretrain.data.dedup)
    threshold: float = between(0.0, 1.0, 0.8, low_open=True, high_open=True)
    num_perm: int = between(2, 8 * K, 128)
    shingle: int = between(1, K, 5)


@dataclass
class DataRayConfig:
    address: Optional[str] = None    # a running cluster: "auto", host:port, ray://host:10001; None: start one here


@dataclass
class DataConfig:
    name: str = MISSING
    sources: Dict[str, SourceConfig] = field(default_factory=dict)
    cache_dir: str = MISSING                  # prepared datasets, keyed by a hash of inputs + config
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    seq_length: int = between(2, 16 * M)
    packing: str = "best_fit"                 # best_fit | concat
    # true: each document of a packed row attends only to itself and its positions restart
    # (MindFormers use_eod_reset + document mask); false: plain causal attention across the row
    document_mask: bool = True
    num_shards: int = between(1, M, 1)
    val_fraction: float = between(0.0, 1.0, 0.01, high_open=True)
    workers: int = between(1, K, 2)
    clean: CleanConfig = field(default_factory=CleanConfig)
    dedup: DedupConfig = field(default_factory=DedupConfig)
    engine: str = "local"                     # local (process pool) | ray (tasks on data.ray.address); same output
    ray: DataRayConfig = field(default_factory=DataRayConfig)


@dataclass
class TrainConfig:
    seed: int = between(0, 2**32 - 1, 1234)
    global_batch_size: int = between(1, 16 * M)
    grad_accum: int = derived()               # global_batch_size / (micro_batch_size * dp): the batch rule
    total_tokens: float = between(0.0, 1e15, low_open=True)
    lr_peak: float = between(0.0, 1.0, low_open=True)
    weight_decay: float = between(0.0, 1.0, 0.1, high_open=True)
    adam_beta1: float = between(0.0, 1.0, 0.9, high_open=True)
    adam_beta2: float = between(0.0, 1.0, 0.95, high_open=True)
    adam_eps: float = between(0.0, 1.0, 1.0e-8, low_open=True)
    grad_clip: float = between(0.0, 1e6, 1.0)         # 0: no clipping
    z_loss: float = between(0.0, 1.0, 0.0)
    log_every: int = between(1, 10**9, 1)
    eval_every: int = between(0, 10**9, 50)           # 0: only at each phase's end (none without val rows)
    eval_batches: int = between(1, 10**6, 4)
    save_every_steps: int = between(1, 10**9, 100)
    save_every_minutes: float = between(0.0, 1e6, 60.0, low_open=True)
    keep_checkpoint_max: int = between(1, 10**6, 3)   # the newest checkpoint is the resume point
    efficiency: float = between(0.0, 1.0, 0.45, low_open=True)   # assumed fraction of peak FLOP/s
    # A later phase run alone (phase=reasoning) branches from the previous phase's final checkpoint
    # found here: a run dir, its checkpoints/ dir, or one checkpoint dir (step_*).
    init_from: Optional[str] = None
    engine: str = "auto"                      # auto | pretrain (our loop) | mindformers (its trainer)


@dataclass
class PlanConfig:
    target_days: Optional[float] = between(0.0, 1e5, None, low_open=True)  # print the devices that finish in this
    ignore_memory: bool = False               # launch even when the planned peak memory exceeds the device
    calibrate: bool = False                   # time the real step on this device first (pretrain/train/probe.py)


@dataclass
class PretrainConfig:
    model: ModelConfig = MISSING
    parallel: ParallelConfig = MISSING
    phase: Any = MISSING                      # one PhaseConfig, or {general: .., reasoning: .., anneal: ..}
    hardware: HardwareConfig = MISSING
    data: DataConfig = MISSING
    train: TrainConfig = field(default_factory=TrainConfig)
    resilience: ResilienceConfig = field(default_factory=ResilienceConfig)
    plan: PlanConfig = field(default_factory=PlanConfig)
    run_name: str = MISSING
    run_dir: str = MISSING
    dry_run: bool = False
    launcher: str = "auto"


def register() -> None:
    # Hydra only here: the ranks read the schema (ranges, known keys) of a frozen config without it
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="pretrain_schema", node=PretrainConfig)
    for group, node in [("model", ModelConfig), ("parallel", ParallelConfig), ("phase", PhaseConfig),
                        ("hardware", HardwareConfig), ("data", DataConfig)]:
        cs.store(group="schema", name=group, node=node)
