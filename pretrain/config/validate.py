"""The rulebook: every rule that can refuse a config, in one place.

Three verdicts, so a dry run and a sweep row say what the run would do:
- `problems(cfg)`: the config is wrong (a layout that does not multiply out, a value out of range,
  a phase mix naming an unknown source). Refused everywhere, dry runs and sweeps included.
- `training_problems(cfg)`: the config is sound but no engine here trains it (`engine_of(cfg)`: our
  loop for one device or plain data parallel, MindFormers' trainer for model parallelism and ZeRO;
  MindFormers 1.9.0's classes and CPU kernels have limits). Planned, swept and scripted as "plan
  only"; a launch is refused.
- `memory_problems(cfg, plan)` (pretrain/plan/verdict.py, it needs the planner): the planned peak
  memory per device exceeds the device. A launch is refused (unless plan.ignore_memory=true); the
  line names the largest part and layouts that fit. `verdict(cfg, plan)` there joins the last two.
Each line names the keys and every factor, e.g.
`parallel: dp(8) * tp(4) * pp(2) * cp(1) = 64 != devices(32) of hardware=ascend910b_4x8 (...)`.
Pure Python: no mindspore import. Code elsewhere (model builder, MindFormers export, schedule,
data preparation) relies on these checks instead of repeating them.
"""
import codecs
import os
from pathlib import Path
from typing import Any, Iterator, List, Optional, Tuple

from omegaconf import DictConfig, OmegaConf

from pretrain.config import known_keys, paths, ranges, schema, unset_keys
from pretrain.config.attention import document_attention
from pretrain.config.choices import BUILTIN_SOURCES, DATA_ENGINES, NORMALIZE_FORMS, PACKING_METHODS
from pretrain.config.errors import PretrainConfigError
from pretrain.config.layout import (ENGINES, engine_of, grad_reduce_size, model_split, num_devices,
                                     virtual_stages, world_size)
from pretrain.config.lr_levels import levels
from pretrain.config.phases import phase_steps, phase_tokens, phases
from pretrain.config.resilience import problems as resilience_problems

LR_SCHEDULES = ("cosine", "linear", "constant", "wsd")
RECOMPUTE = ("none", "selective", "full")
PIPELINE_SCHEDULES = ("1f1b", "zero_bubble")
DEVICES = ("cpu", "ascend")
LAUNCHERS = ("auto", "local", "msrun", "print")
# What the installed MindFormers 1.9.0 trains for each of our architectures (see
# pretrain/model/mindformers_config.py for the classes).
ARCHS = ("llama", "qwen3")


# ---------------------------------------------------------------- verdicts

def problems(cfg: DictConfig) -> List[str]:
    """What is wrong with the config itself. Unset keys, unknown keys, then values out of range, come
    alone: the cross-field rules assume a schema-shaped config of sane numbers (no zero head count to
    divide by)."""
    # unset (???) keys first: any other rule would stop at the first it reads (an own option without
    # its defaults: line); then keys the schema lacks (added with `+`): a stray phase.lr under phase=all
    first = unset_keys.unset(cfg) or known_keys.unknown(cfg) or list(_ranges(cfg))
    if first:
        return first
    cfg = resolved(cfg)
    return [*_layout(cfg), *_model(cfg), *_batch(cfg), *_phases(cfg), *_data(cfg), *_run(cfg)]


def resolved(cfg: DictConfig) -> DictConfig:
    """A plain copy with every interpolation resolved once: the rules read derived values (end LRs,
    grad_accum, phase budgets) many times, and OmegaConf parses an interpolation on every read."""
    return OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))


def layout_problems(cfg: DictConfig) -> List[str]:
    """The rules that a change of cfg.parallel alone can break: for trying other layouts on a config
    that passed problems()."""
    return (list(ranges.problems_of(cfg.parallel, schema.ParallelConfig, "parallel"))
            or [*_layout(cfg), *_model(cfg), *_batch(cfg)])


def check(cfg: DictConfig) -> None:
    found = problems(cfg)
    if found:
        raise PretrainConfigError("\n".join(found))


def training_problems(cfg: DictConfig) -> List[str]:
    """What keeps a sound config from training here (so it is "plan only")."""
    return [*_engine(cfg), *_mindformers(cfg)]


def check_trainable(cfg: DictConfig) -> None:
    """For code paths without a plan (the ranks): refuse what nothing here trains."""
    found = training_problems(cfg)
    if found:
        raise PretrainConfigError("\n".join(found))


def check_data_config(d: DictConfig) -> None:
    """The data block alone (for `python -m pretrain.data`, which has no model to compare with)."""
    found = (unset_keys.unset(d, "data.") or list(ranges.problems_of(d, schema.DataConfig, "data"))
             or [*_data_alone(d), *missing_files(d)])
    if found:
        raise PretrainConfigError("\n".join(found))


def _ranges(cfg: DictConfig) -> Iterator[str]:
    """Every out-of-range value of a composed run config (the ranges beside the schema's keys)."""
    for key, kind in (("model", schema.ModelConfig), ("parallel", schema.ParallelConfig),
                      ("hardware", schema.HardwareConfig), ("data", schema.DataConfig),
                      ("train", schema.TrainConfig), ("plan", schema.PlanConfig),
                      ("resilience", schema.ResilienceConfig)):
        if key in cfg:
            yield from ranges.problems_of(cfg[key], kind, key)
    plist = phases(cfg)
    for ph in plist:
        key = "phase" if len(plist) == 1 else f"phase.{ph.name}"
        yield from ranges.problems_of(ph, schema.PhaseConfig, key)


# ---------------------------------------------------------------- the config itself

def _layout(cfg) -> Iterator[str]:
    p, hw = cfg.parallel, cfg.hardware
    used, have = world_size(p), num_devices(hw)
    if used != have:
        free = f"; {have - used} devices would sit idle" if used < have else ""
        yield (f"parallel: dp({p.dp}) * tp({p.tp}) * pp({p.pp}) * cp({p.cp}) = {used} != devices({have}) "
               f"of hardware={hw.name} ({hw.devices_per_node} per node x {hw.num_nodes} nodes){free}; "
               f"pick a parallel layout for {have} devices or a hardware option with {used}")
    if p.recompute not in RECOMPUTE:
        yield f"parallel.recompute={p.recompute!r} must be one of {', '.join(RECOMPUTE)}"
    if p.pipeline_schedule not in PIPELINE_SCHEDULES:
        yield f"parallel.pipeline_schedule={p.pipeline_schedule!r} must be one of {', '.join(PIPELINE_SCHEDULES)}"
    elif p.pipeline_schedule == "zero_bubble" and p.vpp != 2:
        yield (f"parallel.pipeline_schedule=zero_bubble with parallel.vpp={p.vpp}: MindSpore's zero-bubble "
               f"schedule is ZB-V, two virtual stages per rank; set parallel.vpp=2 or pipeline_schedule=1f1b")
    if p.vpp > 1 and p.pp == 1:
        yield f"parallel.vpp={p.vpp} needs pipeline parallel: pp(1) has no stages to interleave"
    if p.sequence_parallel and p.tp == 1:
        yield "parallel.sequence_parallel=true needs tp > 1: it shards activations over the tensor-parallel group (tp=1)"
    if hw.device not in DEVICES:
        yield f"hardware.device={hw.device!r} must be one of {', '.join(DEVICES)}"
    if hw.precision not in ("bf16", "fp32"):
        yield f"hardware.precision={hw.precision!r} must be bf16 or fp32"


def _model(cfg) -> Iterator[str]:
    m, p = cfg.model, cfg.parallel
    if m.head_dim is None and m.hidden_size % m.num_heads:
        yield (f"model.hidden_size({m.hidden_size}) % model.num_heads({m.num_heads}) != 0: make hidden_size a "
               f"multiple of num_heads, or set model.head_dim explicitly (then planned only: MindFormers 1.9.0 "
               f"cannot train it)")
    if m.num_heads % m.num_kv_heads:
        yield f"model.num_heads({m.num_heads}) % model.num_kv_heads({m.num_kv_heads}) != 0 (grouped-query attention)"
    for key in ("num_heads", "num_kv_heads", "vocab_size"):
        if m[key] % p.tp:
            yield (f"model.{key}({m[key]}) % parallel.tp({p.tp}) = {m[key] % p.tp}: tensor parallel splits "
                   f"{key.replace('num_', '').replace('_', ' ')} evenly (model={m.name}, parallel={p.name})")
    if m.ffn_hidden_size % p.tp:
        yield f"model.ffn_hidden_size({m.ffn_hidden_size}) % parallel.tp({p.tp}) != 0 (model={m.name})"
    yield from _pipeline_split(m, p)
    if m.num_experts:
        if not 1 <= m.num_experts_per_token <= m.num_experts:
            yield f"model.num_experts_per_token({m.num_experts_per_token}) must be in 1..num_experts({m.num_experts})"
        if m.num_experts % p.ep:
            yield f"model.num_experts({m.num_experts}) % parallel.ep({p.ep}) != 0 (model={m.name}, parallel={p.name})"
        if grad_reduce_size(p) % p.ep:
            yield (f"parallel.ep({p.ep}) must divide dp({p.dp}) * cp({p.cp}) = {grad_reduce_size(p)}: "
                   f"experts are sharded inside the data-parallel group")
    elif p.ep > 1:
        yield f"parallel.ep={p.ep} but model={m.name} is dense (model.num_experts=0): use ep=1 or a MoE model"
    if m.seq_length > m.max_position_embeddings:
        yield f"model.seq_length({m.seq_length}) > model.max_position_embeddings({m.max_position_embeddings}) (model={m.name})"
    if p.cp > 1 and m.seq_length % (2 * p.cp):
        yield f"model.seq_length({m.seq_length}) % (2 * parallel.cp({p.cp})) != 0: context parallel splits each sequence into 2*cp chunks"
    if m.init_method not in ("normal", "tiny"):
        yield f"model.init_method={m.init_method!r} must be normal or tiny"
    if m.arch not in ARCHS:
        yield f"model.arch={m.arch!r} must be one of {', '.join(ARCHS)}"


def _pipeline_split(m, p) -> Iterator[str]:
    stages = virtual_stages(p)
    if p.pipeline_layers is not None:
        split = list(p.pipeline_layers)
        if len(split) != stages or sum(split) != m.num_layers or min(split, default=0) < 1:
            yield (f"parallel.pipeline_layers={split}: needs pp({p.pp}) * vpp({p.vpp}) = {stages} entries >= 1 "
                   f"summing to model.num_layers({m.num_layers}); sum is {sum(split)}, {len(split)} entries")
    elif m.num_layers % stages:
        yield (f"model.num_layers({m.num_layers}) % (pp({p.pp}) * vpp({p.vpp}) = {stages}) = {m.num_layers % stages}: "
               f"layers do not split evenly into pipeline stages; set parallel.pipeline_layers to an explicit uneven split "
               f"(model={m.name}, parallel={p.name})")


def _batch(cfg) -> Iterator[str]:
    t, p = cfg.train, cfg.parallel
    per_step = p.micro_batch_size * p.dp
    if t.global_batch_size % per_step:
        yield (f"train.global_batch_size({t.global_batch_size}) % (parallel.micro_batch_size({p.micro_batch_size}) * "
               f"dp({p.dp}) = {per_step}) = {t.global_batch_size % per_step}: gradient accumulation needs a whole number")
    elif p.pipeline_schedule == "zero_bubble" and p.pp > 1 and t.global_batch_size // per_step < 2 * p.pp:
        yield (f"train.grad_accum({t.global_batch_size // per_step}) < 2 * parallel.pp({p.pp}): the "
               f"zero-bubble schedule (ZB-V) needs at least 2·pp micro-batches per step; raise "
               f"train.global_batch_size or use pipeline_schedule=1f1b")
    elif p.vpp > 1 and (t.global_batch_size // per_step) % p.pp:
        yield (f"train.grad_accum({t.global_batch_size // per_step}) % parallel.pp({p.pp}) != 0: the interleaved "
               f"schedule (vpp={p.vpp}) needs micro-batches in multiples of pp")


def _phases(cfg) -> Iterator[str]:
    plist = phases(cfg)
    fraction_sum = sum(ph.token_fraction or 0 for ph in plist)
    if len(plist) > 1 and fraction_sum > 1 + 1e-9:
        yield f"phase.*.token_fraction sums to {fraction_sum:g} > 1: the phases would train past train.total_tokens"
    per_step = int(cfg.train.global_batch_size) * int(cfg.model.seq_length)
    for i, ph in enumerate(plist):
        key = "phase" if len(plist) == 1 else f"phase.{ph.name}"
        if (ph.token_fraction is None) == (ph.tokens is None):
            yield f"{key}: set exactly one of token_fraction ({ph.token_fraction}) and tokens ({ph.tokens})"
        elif phase_steps(cfg, ph) < 1:
            yield (f"{key}: {phase_tokens(cfg, ph):.0f} tokens < one step of train.global_batch_size"
                   f"({cfg.train.global_batch_size}) x model.seq_length({cfg.model.seq_length}) = {per_step} tokens; "
                   f"raise train.total_tokens or the phase's tokens")
        lr = ph.lr
        if lr.schedule not in LR_SCHEDULES:
            yield f"{key}.lr.schedule={lr.schedule!r} must be one of {', '.join(LR_SCHEDULES)}"
        if lr.peak is None and i == 0 and ph.name == "general":
            yield f"{key}.lr.peak is null: the first phase has no previous LR to continue from; set a value"
        # a continuing phase (peak null) decays from where the previous one ends (run alone: known at start)
        top, bound = (lr.peak, f"lr.peak({lr.peak})") if lr.peak is not None else (1, "1")
        if lr.peak is None and i:
            top = levels(plist)[i][0]
            bound = f"{top:g}, where phase.{plist[i - 1].name} ends"
        if lr.end is not None and not 0 <= lr.end <= top:
            yield (f"{key}.lr.end={lr.end} must be in [0, {bound}]: a phase decays, it does not climb "
                   f"(or leave lr.end null: peak x lr.end_ratio)")
        if not ph.mix:
            yield f"{key}.mix is empty: name at least one of data.sources ({', '.join(cfg.data.sources)})"
        for name, weight in ph.mix.items():
            if name not in cfg.data.sources:
                yield (f"{key}.mix.{name}: no such source in data={cfg.data.name} "
                       f"(known: {', '.join(cfg.data.sources)})")
            elif not weight > 0:
                yield f"{key}.mix.{name}={weight} must be > 0"


def _data(cfg) -> Iterator[str]:
    d, m = cfg.data, cfg.model
    if d.seq_length != m.seq_length:
        yield f"data.seq_length({d.seq_length}) != model.seq_length({m.seq_length}): packed samples must match the model"
    if d.tokenizer.vocab_size != m.vocab_size:
        yield f"data.tokenizer.vocab_size({d.tokenizer.vocab_size}) != model.vocab_size({m.vocab_size})"
    yield from _data_alone(d)


def _data_alone(d) -> Iterator[str]:
    yield from filter(None, (path_problem(k, v) for k, v in _data_path_keys(d)))
    if not d.sources:
        yield "data.sources is empty: name at least one source (data.sources.NAME.paths=[dir/or/*.jsonl])"
    if d.packing not in PACKING_METHODS:
        yield f"data.packing={d.packing!r} must be one of {', '.join(PACKING_METHODS)}"
    if d.get("engine", "local") not in DATA_ENGINES:
        yield f"data.engine={d.engine!r} must be one of {', '.join(DATA_ENGINES)}"
    if d.clean.normalize not in NORMALIZE_FORMS:
        yield f"data.clean.normalize={d.clean.normalize!r} must be one of {', '.join(NORMALIZE_FORMS)}"
    if d.tokenizer.path is None and not d.tokenizer.train:
        yield "data.tokenizer: no path and train=false; give data.tokenizer.path=... or set data.tokenizer.train=true"
    for name, src in d.sources.items():
        if src.builtin is not None:
            if src.builtin not in BUILTIN_SOURCES:
                yield (f"data.sources.{name}.builtin={src.builtin!r} must be one of {', '.join(BUILTIN_SOURCES)} "
                       f"(or null with paths)")
        elif not src.paths:
            yield f"data.sources.{name}: no paths and no builtin generator; give data.sources.{name}.paths=[...]"
        yield from filter(None, [_encoding_problem(f"data.sources.{name}.encoding", src.get("encoding"))])


def _encoding_problem(key: str, value: Any) -> Optional[str]:
    """A source's encoding (pretrain/data/charsets.py) must be a text codec Python has, and one
    without a shift state: the reader decodes each line on its own."""
    if value is None:
        return None
    try:
        info = codecs.lookup(str(value))
    except LookupError:
        info = None
    if info is None or not info._is_text_encoding:
        return (f"{key}={value!r} is not a text encoding Python knows; give one such as gb18030, big5, "
                f"shift_jis, cp1252 or utf-16 (unset: UTF-8)")
    if info.name.startswith(("iso2022", "hz", "utf-7")):
        return (f"{key}={value!r} has a shift state and cannot be read line by line; convert the files "
                f"to UTF-8")
    return None


# What Linux file systems take (ext4, xfs, tmpfs, overlayfs: NAME_MAX 255, PATH_MAX 4096 with its NUL):
# a longer path fails every open/stat with ENAMETOOLONG, far from the key that gave it.
NAME_MAX, PATH_MAX = 255, 4095


def path_problem(key: str, value: Any) -> Optional[str]:
    """One line when a path-valued key cannot be a path here (too long a name or path), else None."""
    if value is None:
        return None
    raw = os.fsencode(str(value))
    longest = max((len(part) for part in raw.split(b"/")), default=0)
    if len(raw) <= PATH_MAX and longest <= NAME_MAX:
        return None
    shown = str(value) if len(str(value)) <= 40 else f"{str(value)[:40]}... ({len(raw)} bytes)"
    return (f"{key}={shown!r} cannot be a path: a file name may have at most {NAME_MAX} bytes (this one's "
            f"longest has {longest}) and a path {PATH_MAX}; give the path of a real file or directory")


def _path_keys(cfg) -> Iterator[Tuple[str, Any]]:
    yield "run_dir", cfg.get("run_dir")
    yield "train.init_from", cfg.train.get("init_from")


def _data_path_keys(d) -> Iterator[Tuple[str, Any]]:
    yield "data.cache_dir", d.get("cache_dir")
    yield "data.tokenizer.path", d.tokenizer.get("path")
    for name, src in d.sources.items():
        for path in src.paths or ():
            yield f"data.sources.{name}.paths", path


def missing_files(d: DictConfig) -> List[str]:
    """The data files the config names that this host lacks. Host state, like the devices: a launch
    or a data preparation here refuses them; a dry run (maybe planned away from the cluster's
    storage) only says so."""
    found = []
    if any(path_problem(k, v) for k, v in _data_path_keys(d)):
        return found     # already refused by the rules: a stat of such a path raises ENAMETOOLONG
    if d.tokenizer.path is not None and not Path(d.tokenizer.path).is_file():
        found.append(f"data.tokenizer.path: no such file {d.tokenizer.path!r}")
    for name, src in d.sources.items():
        for path in src.paths:
            if not paths.matches(path):
                found.append(f"data.sources.{name}.paths: no such file or directory {path!r} (relative to "
                             f"{Path.cwd()})")
    return found


def _run(cfg) -> Iterator[str]:
    yield from filter(None, (path_problem(k, v) for k, v in _path_keys(cfg)))
    yield from resilience_problems(cfg.resilience)
    if str(cfg.train.get("engine", "auto")) not in ENGINES:
        yield f"train.engine={cfg.train.engine!r} must be one of {', '.join(ENGINES)}"
    if cfg.launcher not in LAUNCHERS:
        yield f"launcher={cfg.launcher!r} must be one of {', '.join(LAUNCHERS)}"
    elif cfg.launcher == "local" and num_devices(cfg.hardware) > 1:
        yield (f"launcher=local trains in this one process, but hardware={cfg.hardware.name} has "
               f"{num_devices(cfg.hardware)} devices; use launcher=auto (msrun)")


# ---------------------------------------------------------------- what trains it

# MindSpore 2.9.0's parallel frontend (libmindspore_frontend.so) raises "for semi_auto_parallel/
# auto_parallel mode, currently only support Ascend/GPU backend" when it compiles a graph of a split
# model on CPU: tensor/pipeline/context/expert parallel exist on Ascend (and GPU) only.
SEMI_AUTO_ON_CPU = ("MindSpore 2.9.0 refuses semi_auto_parallel on CPU (its parallel frontend, "
                    "libmindspore_frontend.so, raises 'for semi_auto_parallel/auto_parallel mode, "
                    "currently only support Ascend/GPU backend' when it compiles the graph)")


def _engine(cfg) -> Iterator[str]:
    """What the engine that would train the config cannot run. Our loop (pretrain/train) runs one
    device or plain data parallel: with tp/pp/cp/ep > 1 it would run micro-batches as separate graph
    calls (no pipeline schedule) and check norms per shard, and with ZeRO every rank would load rank
    0's whole checkpoint. MindFormers' trainer runs those, on Ascend."""
    p, hw = cfg.parallel, cfg.hardware
    which, split = engine_of(cfg), model_split(cfg.parallel)
    if which not in ENGINES:
        return   # problems() names it
    if which == "pretrain":
        if split:
            yield (f"parallel={p.name}: {' '.join(split)} > 1 with train.engine=pretrain: this project's "
                   f"training loop runs one device or plain data parallel only; set "
                   f"train.engine=mindformers (or auto) so MindFormers' trainer runs it")
        if p.zero_stage > 0:
            yield (f"parallel.zero_stage={p.zero_stage} with train.engine=pretrain: ZeRO is MindSpore's "
                   f"optimizer parallel, which this project's loop does not run (every rank keeps the full "
                   f"optimizer); set parallel.zero_stage=0 or train.engine=mindformers (or auto)")
        return
    if hw.device == "cpu" and split:
        yield (f"parallel={p.name}: {' '.join(split)} > 1 on hardware.device=cpu: {SEMI_AUTO_ON_CPU}; "
               f"plan it here with dry_run=true and train it on an ascend hardware option")
    elif hw.device == "cpu" and p.dp > 1:
        yield (f"parallel.dp={p.dp} with train.engine=mindformers on hardware.device=cpu: MindFormers "
               f"1.9.0's trainer runs data parallel only under semi_auto_parallel (in data_parallel mode "
               f"BaseTrainer._check_global_batch_size_for_auto_parallel in "
               f"mindformers/trainer/base_trainer.py resets parallel_config.data_parallel to 1, and "
               f"GPTModel's initialize_model_parallel -> _valid_parallel_config in "
               f"parallel_core/inference/parallel_state.py then refuses world size {p.dp} != 1), and "
               f"{SEMI_AUTO_ON_CPU}; on CPU use train.engine=pretrain (or auto) for data parallel")
    if hw.device == "cpu" and p.zero_stage > 0:
        yield (f"parallel.zero_stage={p.zero_stage} on hardware.device=cpu: MindSpore's optimizer parallel "
               f"is not run on CPU by this project (the CPU proof covers data parallel only); set "
               f"parallel.zero_stage=0 on CPU, or plan it with dry_run=true")
    if document_attention(cfg) == "compressed" and p.micro_batch_size > 1:
        yield (f"parallel.micro_batch_size={p.micro_batch_size} with train.engine=mindformers and "
               f"data.document_mask=true at seq_length {cfg.model.seq_length}: our shard loader gives "
               f"MindFormers each row's document ends (actual_seq_len) and its batching does not add the "
               f"row offsets; use micro_batch_size=1 (raise grad accumulation instead) or "
               f"data.document_mask=false")
    if float(cfg.train.z_loss) > 0:
        yield (f"train.z_loss={cfg.train.z_loss} with train.engine=mindformers: MindFormers 1.9.0's "
               f"language-model loss has no z-loss term; set train.z_loss=0 or train on one device / plain "
               f"data parallel (train.engine=pretrain)")


def _mindformers(cfg) -> Iterator[str]:
    """What the installed MindFormers 1.9.0 training graph cannot train, or would silently build
    differently, and what has no CPU kernel."""
    m, hw = cfg.model, cfg.hardware
    moe = int(m.num_experts or 0) > 0
    if m.arch == "qwen3" and not m.qk_layernorm:
        yield ("model.arch=qwen3 with model.qk_layernorm=false: MindFormers' Qwen3 training class always "
               "builds QK-norm; use arch=llama for a model without it")
    if m.arch == "llama" and m.tie_embeddings:
        yield ("model.tie_embeddings=true with model.arch=llama: MindFormers 1.9.0's class for that layout "
               "(TeleChat3ForCausalLM) never ties the head; set model.tie_embeddings=false or use arch=qwen3")
    if m.sandwich_norm and m.arch != "llama":
        yield (f"model.sandwich_norm=true with model.arch={m.arch}: the depth-scaled sandwich-norm class "
               f"(pretrain/model/sandwich.py, PanguUltraForCausalLM) extends MindFormers' TeleChat3 decoder, "
               f"the arch=llama layout; set model.arch=llama or model.sandwich_norm=false")
    if moe and float(cfg.train.z_loss) > 0:
        yield (f"train.z_loss={cfg.train.z_loss} with model.num_experts={m.num_experts}: z-loss is computed "
               f"from the model's logits, a path without MindFormers' MoE balance loss; set train.z_loss=0")
    if m.hidden_size % m.num_heads:   # with head_dim set: the rulebook's first rule let it through
        yield (f"model.hidden_size({m.hidden_size}) % model.num_heads({m.num_heads}) != 0 (model.head_dim="
               f"{m.head_dim}): MindFormers 1.9.0's attention (parallel_core/training_graph/transformer/"
               f"attention.py) requires hidden_size to be a multiple of num_heads whatever the head size; "
               f"make hidden_size a multiple of num_heads to train here")
    if hw.device == "cpu" and hw.precision != "fp32":
        yield (f"hardware.precision={hw.precision} on hardware.device=cpu: the CPU graph runs in fp32 only "
               f"(bf16 fails or is slower); set hardware.precision=fp32")
