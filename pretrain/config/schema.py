"""Typed schema per config group, registered in Hydra's ConfigStore: every key's default and meaning.

Each option file lists its group's schema first in `defaults`, so a typo'd key or a wrong type
fails at compose time with the key named. `???` (MISSING) marks values an option must set. Every
default is written here once, with a line saying what the key means; conf/config.yaml sets only
what differs (the run's name and dir, the train.* values the model's recipe sets). A count, size or
rate declares its range beside it (`between(low, high, default)`, pretrain/config/ranges.py).
"""
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from omegaconf import MISSING

from pretrain.config.ranges import between, derived
from pretrain.config.resilience import ResilienceConfig

K, M = 2**10, 2**20


@dataclass
class ModelConfig:
    name: str = MISSING                       # the option's name; the run dir takes the option picked
    arch: str = "llama"                       # llama | qwen3 (QK-norm)
    hidden_size: int = between(1, M)          # the residual stream's width
    num_layers: int = between(1, 10 * K)      # transformer blocks
    num_heads: int = between(1, 64 * K)       # query heads
    num_kv_heads: int = between(1, 64 * K)    # key/value heads; fewer than num_heads: grouped-query
    head_dim: Optional[int] = between(1, 64 * K, None)   # None: hidden_size // num_heads
    ffn_hidden_size: int = between(1, 16 * M)  # the SwiGLU MLP's inner width
    vocab_size: int = between(8, 16 * M)      # tokens the embedding and the head cover; the tokenizer's size
    seq_length: int = between(2, 16 * M)      # tokens per training sequence (data.seq_length must match)
    max_position_embeddings: int = between(2, 16 * M)   # the longest sequence RoPE serves (>= seq_length)
    rope_theta: float = between(0.0, 1e12, 10000.0, low_open=True)   # RoPE's base wavelength
    norm_eps: float = between(0.0, 0.1, 1.0e-5, low_open=True)      # RMSNorm's epsilon
    tie_embeddings: bool = False              # the output head shares the input embedding (arch=qwen3 only)
    qk_layernorm: bool = False                # RMSNorm on each head's queries and keys (arch=qwen3 needs it)
    # Mixture of experts: num_experts 0 means dense.
    num_experts: int = between(0, 64 * K, 0)  # routed experts per MoE layer
    num_experts_per_token: int = between(0, 64 * K, 0)       # experts each token is routed to (top-k)
    moe_ffn_hidden_size: Optional[int] = between(1, 16 * M, None)   # an expert's width; None: ffn_hidden_size
    num_shared_experts: int = between(0, K, 0)   # experts every token passes through besides its routed ones
    # Stability switches (Pangu Ultra): depth-scaled sandwich norm and TinyInit.
    sandwich_norm: bool = False               # a norm after attention and MLP too, scaled by depth
    init_method: str = "normal"               # normal (init_std everywhere) | tiny (std from width and depth)
    init_std: float = between(0.0, 1.0, 0.02, low_open=True)  # std of the normal initialisation
    # The published recipe's batch, token budget and peak LR (train.* defaults read them).
    global_batch_size: int = between(1, 16 * M)                # sequences per optimizer step
    total_tokens: float = between(0.0, 1e15, low_open=True)   # tokens of the whole curriculum
    lr_peak: float = between(0.0, 1.0, low_open=True)         # the first phase's peak learning rate


@dataclass
class ParallelConfig:
    name: str = MISSING                       # the option's name; the run dir takes the option picked
    dp: int = between(1, M, 1)                # data parallel: replicas, each on its share of the batch
    tp: int = between(1, K, 1)                # tensor parallel: each layer's weights split over tp devices
    pp: int = between(1, K, 1)                # pipeline parallel: the layers split into pp stages
    ep: int = between(1, 64 * K, 1)           # experts split over ep ranks inside dp*cp
    cp: int = between(1, K, 1)                # context (sequence) parallel
    vpp: int = between(1, 64, 1)              # virtual pipeline stages per pp rank
    sequence_parallel: bool = False           # activations sharded over the tp group too (needs tp > 1)
    zero_stage: int = between(0, 3, 0)        # 0 none, 1 optimizer, 2 +grads, 3 +weights
    micro_batch_size: int = between(1, 64 * K, 1)   # sequences per forward/backward on one replica
    recompute: str = "none"                   # none | selective | full
    pipeline_schedule: str = "1f1b"           # 1f1b | zero_bubble
    pipeline_layers: Optional[List[int]] = None  # explicit uneven split, one entry per pp*vpp stage
    grad_fp32: bool = True                    # fp32 main grads (Megatron's default)


@dataclass
class LRConfig:
    # None: continue from the previous phase's final LR
    peak: Optional[float] = between(0.0, 1.0, None, low_open=True)
    end: Optional[float] = between(0.0, 1.0, None)   # the LR the phase decays to; None: peak x end_ratio
    end_ratio: float = between(0.0, 1.0, 0.1)        # end relative to the phase's own peak (continuing: its start)
    # share of the phase's steps that ramp linearly from its start LR to peak
    warmup_fraction: float = between(0.0, 1.0, 0.0, high_open=True)
    schedule: str = "cosine"                  # cosine | linear | constant | wsd
    # wsd: share of the steps after warmup that decay linearly to end (the rest stay at peak)
    wsd_decay_fraction: float = between(0.0, 1.0, 0.2, low_open=True)


@dataclass
class PhaseConfig:
    name: str = MISSING                       # general | reasoning | anneal: its place in the curriculum
    # share of train.total_tokens ...
    token_fraction: Optional[float] = between(0.0, 1.0, None, low_open=True)
    tokens: Optional[float] = between(0.0, 1e15, None, low_open=True)   # ... or an absolute budget
    mix: Dict[str, float] = field(default_factory=dict)   # prepared dataset -> weight
    lr: LRConfig = field(default_factory=LRConfig)        # the phase's learning-rate schedule


@dataclass
class HardwareConfig:
    name: str = MISSING                       # the option's name; the run dir takes the option picked
    device: str = MISSING                     # cpu | ascend
    chip: str = ""                            # a label for the reader (910B, x86_64); nothing reads it
    devices_per_node: int = between(1, K, 1)  # devices (processes) per node
    num_nodes: int = between(1, 100_000, 1)   # more than 1: node scripts and a Slurm submission
    memory_gb_per_device: float = between(0.0, 100_000.0, low_open=True)   # what the plan must fit in, GB
    peak_tflops: float = between(0.0, 100_000.0, low_open=True)   # dense peak at `precision`, per device
    intra_node_gbps: float = between(0.0, 1e6, 10.0, low_open=True)   # GB/s per device inside a node
    inter_node_gbps: float = between(0.0, 1e6, 10.0, low_open=True)   # GB/s per device between nodes
    precision: str = "bf16"                   # bf16 | fp32
    failures_per_device_hour: float = between(0.0, 1.0, 1.97e-5)  # Llama 3: 419 interruptions / 54 days / 16k GPUs
    master_addr: str = "127.0.0.1"            # msrun's scheduler host (the first node)
    master_port: int = between(1, 65535, 8118)   # its port; busy on a single host: a free one is taken
    min_devices: int = between(1, 2**30, 1)   # resilience.elastic never shrinks the job below this
    # One node's aggregate checkpoint write bandwidth: every rank writes its own shard, so a node writes
    # devices_per_node shards at once. 2 GB/s is a conservative figure for a parallel file system seen
    # from one node; measure yours (python -m pretrain.bench.resilience times a save).
    checkpoint_write_gbps: float = between(0.0, 1e6, 2.0, low_open=True)
    # A CPU process holds MindSpore's runtime and, per training graph it compiled, an unfused multiple
    # of the planned activations: what the plan assumes for it until a calibration measures it.
    runtime_gb: float = between(0.0, 1e4, 0.0)                    # MindSpore's runtime, GB per process
    graph_activation_multiple: float = between(1.0, 1e3, 1.0)    # x the planned activations, per graph
    # every node on this host, each in a network namespace of its own, under the job controller
    # (pretrain/launch/controller.py): a cluster stand-in for tests (needs root)
    nodes_on_this_host: bool = False


@dataclass
class SourceConfig:
    paths: List[str] = MISSING                # files, directories or globs (.txt .jsonl .parquet, .gz/.zst)
    text_field: str = "text"                  # the .jsonl key that holds a document's text
    builtin: Optional[str] = None             # a generated sample source: general | reasoning | anneal
    encoding: Optional[str] = None            # of the files that are not UTF-8 (e.g. gb18030); None: refused


@dataclass
class TokenizerConfig:
    path: Optional[str] = None                # a sentencepiece .model; None: train one (train=true)
    train: bool = False                       # with no path: true trains one on the sources, false is refused
    vocab_size: int = between(8, 16 * M)      # pieces to train; the data options set model.vocab_size
    model_type: str = "bpe"                   # sentencepiece's; bpe: the tokenize stage encodes per word
    train_sentences: int = between(1, 10**9, 200000)   # sampled line groups (~2000 chars each) to train on
    byte_fallback: bool = True                # unknown characters as byte pieces (needs vocab > 260)
    # share of the training text's characters that must be pieces of their own (the rarest rest: bytes);
    # sentencepiece's value for Chinese/Japanese, which keeps the common Han characters whole
    character_coverage: float = between(0.0, 1.0, 0.9995, low_open=True)


@dataclass
class CleanConfig:
    normalize: str = "NFC"                    # Unicode normal form: NFC | NFKC | NFD | NFKD | none
    # shorter documents are dropped; a Chinese or Japanese letter counts 3 (pretrain/data/clean.py)
    min_chars: int = between(0, 10**9, 32)
    max_chars: int = between(1, 10**12, 1000000)   # longer documents are split, not dropped
    # above this share of symbols (not letters, digits or spaces): dropped as markup debris
    max_symbol_ratio: float = between(0.0, 1.0, 0.3)
    # above this share of lines repeating an earlier one: dropped (Gopher's rule)
    max_repeated_line_fraction: float = between(0.0, 1.0, 0.5)


@dataclass
class DedupConfig:
    exact: bool = True                        # drop a document whose text repeats an earlier one's
    near: bool = True                         # drop near duplicates by MinHash LSH (threshold below)
    # near: estimated Jaccard similarity of the sets of `shingle`-unit shingles from which a document is a
    # near duplicate; a unit is a word, or a character of a script written without spaces (Chinese,
    # Japanese, Thai: pretrain.data.dedup)
    threshold: float = between(0.0, 1.0, 0.8, low_open=True, high_open=True)
    num_perm: int = between(2, 8 * K, 128)    # MinHash permutations: more estimate closer, cost more
    shingle: int = between(1, K, 5)           # units per shingle


@dataclass
class DataRayConfig:
    address: Optional[str] = None    # a running cluster: "auto", host:port, ray://host:10001; None: start one here


@dataclass
class DataConfig:
    name: str = MISSING                       # the option's name
    sources: Dict[str, SourceConfig] = field(default_factory=dict)   # name -> files; a phase mixes names
    cache_dir: str = MISSING                  # prepared datasets, keyed by a hash of inputs + config
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)   # one, trained on all sources
    seq_length: int = between(2, 16 * M)      # tokens per packed row; must equal model.seq_length
    packing: str = "best_fit"                 # best_fit | concat
    # true: each document of a packed row attends only to itself and its positions restart
    # (MindFormers use_eod_reset + document mask); false: plain causal attention across the row
    document_mask: bool = True
    # MindRecord files per split; every data-parallel rank reads rows from all of them by global index
    # (so a dp change keeps the data): raise it for many writers/readers
    num_shards: int = between(1, M, 1)
    # share of documents held out for validation, chosen by a hash of each document (stable across runs)
    val_fraction: float = between(0.0, 1.0, 0.01, high_open=True)
    workers: int = between(1, K, 2)           # processes of data.engine=local, threads of tokenizer training
    clean: CleanConfig = field(default_factory=CleanConfig)   # filters before dedup
    dedup: DedupConfig = field(default_factory=DedupConfig)   # within each source
    engine: str = "local"                     # local (process pool) | ray (tasks on data.ray.address)
    ray: DataRayConfig = field(default_factory=DataRayConfig)   # data.engine=ray's cluster


@dataclass
class TrainConfig:
    seed: int = between(0, 2**32 - 1, 1234)   # initial weights and each phase's data order
    global_batch_size: int = between(1, 16 * M)       # sequences per optimizer step
    grad_accum: int = derived()               # global_batch_size / (micro_batch_size * dp): the batch rule
    total_tokens: float = between(0.0, 1e15, low_open=True)   # the whole curriculum; phases take fractions
    lr_peak: float = between(0.0, 1.0, low_open=True)         # the first phase's peak LR (its lr.peak)
    weight_decay: float = between(0.0, 1.0, 0.1, high_open=True)   # AdamW's decoupled weight decay
    adam_beta1: float = between(0.0, 1.0, 0.9, high_open=True)     # decay of the gradient's running mean
    adam_beta2: float = between(0.0, 1.0, 0.95, high_open=True)    # decay of its running square
    adam_eps: float = between(0.0, 1.0, 1.0e-8, low_open=True)     # added to Adam's denominator
    grad_clip: float = between(0.0, 1e6, 1.0)         # max global gradient norm; 0: no clipping
    z_loss: float = between(0.0, 1.0, 0.0)            # weight of log(Z)^2 per token (keeps logits small)
    log_every: int = between(1, 10**9, 1)             # steps between training records in metrics.jsonl
    eval_every: int = between(0, 10**9, 50)           # 0: only at each phase's end (none without val rows)
    eval_batches: int = between(1, 10**6, 4)          # validation batches per evaluation, the same each time
    save_every_steps: int = between(1, 10**9, 100)    # a checkpoint every this many steps ...
    save_every_minutes: float = between(0.0, 1e6, 60.0, low_open=True)   # ... and at least this often
    keep_checkpoint_max: int = between(1, 10**6, 3)   # the newest checkpoint is the resume point
    # assumed model-FLOPs efficiency (share of peak FLOP/s) the planner uses for step-time estimates
    efficiency: float = between(0.0, 1.0, 0.45, low_open=True)
    # A later phase run alone (phase=reasoning) branches from the previous phase's final checkpoint
    # found here: a run dir, its checkpoints/ dir, or one checkpoint dir (step_*).
    init_from: Optional[str] = None
    # auto: our loop for one device / plain data parallel, MindFormers' trainer for the rest
    engine: str = "auto"                      # auto | pretrain (our loop) | mindformers (its trainer)


@dataclass
class PlanConfig:
    target_days: Optional[float] = between(0.0, 1e5, None, low_open=True)  # print the devices that finish in this
    ignore_memory: bool = False               # launch even when the planned peak memory exceeds the device
    # true: time the real step here first (pretrain/train/probe.py), then plan with it; every run
    # records its own measurement too (<data.cache_dir>/calibration/<hardware>.json)
    calibrate: bool = False


@dataclass
class PretrainConfig:
    model: ModelConfig = MISSING              # model=NAME (conf/model/NAME.yaml): architecture and recipe
    parallel: ParallelConfig = MISSING        # parallel=NAME: the layout, ZeRO, micro-batch, recompute
    phase: Any = MISSING                      # one PhaseConfig, or {general: .., reasoning: .., anneal: ..}
    hardware: HardwareConfig = MISSING        # hardware=NAME: devices, nodes, memory, peak TFLOP/s
    data: DataConfig = MISSING                # data=NAME: sources, tokenizer, cleaning, packing, shards
    train: TrainConfig = field(default_factory=TrainConfig)                  # the optimizer and the cadence
    resilience: ResilienceConfig = field(default_factory=ResilienceConfig)   # surviving failures
    plan: PlanConfig = field(default_factory=PlanConfig)                     # the estimate before a launch
    run_name: str = MISSING                   # <model>-<parallel>-<hardware>[-<branch>] (conf/config.yaml)
    run_dir: str = MISSING                    # checkpoints, logs and the frozen config.yaml
    dry_run: bool = False                     # compose, check, plan and freeze; launch nothing
    # auto: this process (one device), msrun (one host) or node scripts | local: this process |
    # msrun: msrun even for one device | print: say what would run
    launcher: str = "auto"


def register() -> None:
    # Hydra only here: the ranks read the schema (ranges, known keys) of a frozen config without it
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    # once per process: storing converts every dataclass to a config (~13 ms), and compose() in
    # tests and tools registers before each config it composes
    if "pretrain_schema.yaml" in cs.repo:
        return
    cs.store(name="pretrain_schema", node=PretrainConfig)
    for group, node in [("model", ModelConfig), ("parallel", ParallelConfig), ("phase", PhaseConfig),
                        ("hardware", HardwareConfig), ("data", DataConfig)]:
        cs.store(group="schema", name=group, node=node)
