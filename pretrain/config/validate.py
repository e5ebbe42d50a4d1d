"""Every cross-field rule of a composed config, in one place.

`problems(cfg)` returns one line per broken rule, each naming the keys and every factor, e.g.
`parallel: dp(8) * tp(4) * pp(2) * cp(1) = 64 != devices(32) of hardware=ascend910b_4x8 (...)`.
`check(cfg)` raises PretrainConfigError with those lines. Pure Python: no mindspore import.
"""
from pathlib import Path
from typing import Iterator, List

from omegaconf import DictConfig

from pretrain.config.errors import PretrainConfigError
from pretrain.train.schedule import levels

LR_SCHEDULES = ("cosine", "linear", "constant", "wsd")
RECOMPUTE = ("none", "selective", "full")
PIPELINE_SCHEDULES = ("1f1b", "zero_bubble")
DEVICES = ("cpu", "ascend")
LAUNCHERS = ("auto", "local", "msrun", "print")


def phases(cfg: DictConfig) -> List[DictConfig]:
    """The phases this run trains, in order: one phase, or the curriculum mapping."""
    node = cfg.phase
    return [node] if "name" in node else [node[k] for k in node]


def num_devices(hw) -> int:
    return int(hw.devices_per_node) * int(hw.num_nodes)


def problems(cfg: DictConfig) -> List[str]:
    return [*_layout(cfg), *_model(cfg), *_batch(cfg), *_phases(cfg), *_data(cfg), *_run(cfg)]


def check(cfg: DictConfig) -> None:
    found = problems(cfg)
    if found:
        raise PretrainConfigError("\n".join(found))


def _layout(cfg) -> Iterator[str]:
    p, hw = cfg.parallel, cfg.hardware
    for key in ("dp", "tp", "pp", "ep", "cp", "vpp", "micro_batch_size"):
        if p[key] < 1:
            yield f"parallel.{key}={p[key]} must be >= 1 (parallel={p.name})"
    if any(p[k] < 1 for k in ("dp", "tp", "pp", "cp")):
        return
    used, have = p.dp * p.tp * p.pp * p.cp, num_devices(hw)
    if used != have:
        free = f"; {have - used} devices would sit idle" if used < have else ""
        yield (f"parallel: dp({p.dp}) * tp({p.tp}) * pp({p.pp}) * cp({p.cp}) = {used} != devices({have}) "
               f"of hardware={hw.name} ({hw.devices_per_node} per node x {hw.num_nodes} nodes){free}; "
               f"pick a parallel layout for {have} devices or a hardware option with {used}")
    if p.zero_stage not in (0, 1, 2, 3):
        yield f"parallel.zero_stage={p.zero_stage} must be 0, 1, 2 or 3 (parallel={p.name})"
    if p.recompute not in RECOMPUTE:
        yield f"parallel.recompute={p.recompute!r} must be one of {', '.join(RECOMPUTE)}"
    if p.pipeline_schedule not in PIPELINE_SCHEDULES:
        yield f"parallel.pipeline_schedule={p.pipeline_schedule!r} must be one of {', '.join(PIPELINE_SCHEDULES)}"
    if p.vpp > 1 and p.pp == 1:
        yield f"parallel.vpp={p.vpp} needs pipeline parallel: pp(1) has no stages to interleave"
    if p.sequence_parallel and p.tp == 1:
        yield "parallel.sequence_parallel=true needs tp > 1: it shards activations over the tensor-parallel group (tp=1)"
    if hw.device not in DEVICES:
        yield f"hardware.device={hw.device!r} must be one of {', '.join(DEVICES)}"
    elif hw.device == "cpu" and (p.tp > 1 or p.pp > 1 or p.cp > 1 or p.ep > 1) and not cfg.dry_run:
        yield (f"parallel={p.name}: tp({p.tp}) pp({p.pp}) cp({p.cp}) ep({p.ep}) cannot run on hardware.device=cpu "
               f"(MindSpore's semi-auto parallel needs Ascend/GPU); plan it with dry_run=true or use an ascend hardware")


def _model(cfg) -> Iterator[str]:
    m, p = cfg.model, cfg.parallel
    if m.head_dim is None and m.hidden_size % m.num_heads:
        yield f"model.hidden_size({m.hidden_size}) % model.num_heads({m.num_heads}) != 0; set model.head_dim explicitly"
    if m.num_heads % m.num_kv_heads:
        yield f"model.num_heads({m.num_heads}) % model.num_kv_heads({m.num_kv_heads}) != 0 (grouped-query attention)"
    if p.tp >= 1:
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
        if p.ep >= 1 and m.num_experts % p.ep:
            yield f"model.num_experts({m.num_experts}) % parallel.ep({p.ep}) != 0 (model={m.name}, parallel={p.name})"
        if p.ep >= 1 and p.dp >= 1 and (p.dp * p.cp) % p.ep:
            yield f"parallel.ep({p.ep}) must divide dp({p.dp}) * cp({p.cp}) = {p.dp * p.cp}: experts are sharded inside the data-parallel group"
    elif p.ep > 1:
        yield f"parallel.ep={p.ep} but model={m.name} is dense (model.num_experts=0): use ep=1 or a MoE model"
    if m.seq_length > m.max_position_embeddings:
        yield f"model.seq_length({m.seq_length}) > model.max_position_embeddings({m.max_position_embeddings}) (model={m.name})"
    if p.cp >= 1 and m.seq_length % (2 * p.cp) and p.cp > 1:
        yield f"model.seq_length({m.seq_length}) % (2 * parallel.cp({p.cp})) != 0: context parallel splits each sequence into 2*cp chunks"
    if m.init_method not in ("normal", "tiny"):
        yield f"model.init_method={m.init_method!r} must be normal or tiny"
    if m.arch not in ("llama", "qwen3"):
        yield f"model.arch={m.arch!r} must be llama or qwen3"


def _pipeline_split(m, p) -> Iterator[str]:
    if p.pp < 1 or p.vpp < 1:
        return
    stages = p.pp * p.vpp
    if p.pipeline_layers is not None:
        split = list(p.pipeline_layers)
        if len(split) != stages or sum(split) != m.num_layers or min(split) < 1:
            yield (f"parallel.pipeline_layers={split}: needs pp({p.pp}) * vpp({p.vpp}) = {stages} entries >= 1 "
                   f"summing to model.num_layers({m.num_layers}); sum is {sum(split)}, {len(split)} entries")
    elif m.num_layers % stages:
        yield (f"model.num_layers({m.num_layers}) % (pp({p.pp}) * vpp({p.vpp}) = {stages}) = {m.num_layers % stages}: "
               f"layers do not split evenly into pipeline stages; set parallel.pipeline_layers to an explicit uneven split "
               f"(model={m.name}, parallel={p.name})")


def _batch(cfg) -> Iterator[str]:
    t, p = cfg.train, cfg.parallel
    per_step = p.micro_batch_size * p.dp
    if per_step >= 1 and t.global_batch_size % per_step:
        yield (f"train.global_batch_size({t.global_batch_size}) % (parallel.micro_batch_size({p.micro_batch_size}) * "
               f"dp({p.dp}) = {per_step}) = {t.global_batch_size % per_step}: gradient accumulation needs a whole number")
    elif per_step >= 1 and p.vpp > 1 and (t.global_batch_size // per_step) % p.pp:
        yield (f"train.grad_accum({t.global_batch_size // per_step}) % parallel.pp({p.pp}) != 0: the interleaved "
               f"schedule (vpp={p.vpp}) needs micro-batches in multiples of pp")
    for key in ("lr_peak", "total_tokens"):
        if not t[key] > 0:
            yield f"train.{key}={t[key]} must be > 0"
    if t.keep_checkpoint_max < 1:
        yield f"train.keep_checkpoint_max={t.keep_checkpoint_max} must be >= 1 (the newest checkpoint is the resume point)"
    if t.grad_clip < 0 or not 0 <= t.weight_decay < 1:
        yield f"train.grad_clip({t.grad_clip}) must be >= 0 and train.weight_decay({t.weight_decay}) in [0, 1)"
    if not 0 < t.efficiency <= 1:
        yield f"train.efficiency={t.efficiency} must be in (0, 1]: it is the assumed fraction of peak FLOP/s"


def _phases(cfg) -> Iterator[str]:
    plist = phases(cfg)
    fraction_sum = sum(ph.token_fraction or 0 for ph in plist)
    if len(plist) > 1 and fraction_sum > 1 + 1e-9:
        yield f"phase.*.token_fraction sums to {fraction_sum:g} > 1: the phases would train past train.total_tokens"
    for i, ph in enumerate(plist):
        key = "phase" if len(plist) == 1 else f"phase.{ph.name}"
        if (ph.token_fraction is None) == (ph.tokens is None):
            yield f"{key}: set exactly one of token_fraction ({ph.token_fraction}) and tokens ({ph.tokens})"
        elif ph.token_fraction is not None and not 0 < ph.token_fraction <= 1:
            yield f"{key}.token_fraction={ph.token_fraction} must be in (0, 1]"
        elif ph.tokens is not None and not ph.tokens > 0:
            yield f"{key}.tokens={ph.tokens} must be > 0"
        lr = ph.lr
        if lr.schedule not in LR_SCHEDULES:
            yield f"{key}.lr.schedule={lr.schedule!r} must be one of {', '.join(LR_SCHEDULES)}"
        if lr.peak is None and i == 0 and ph.name == "general":
            yield f"{key}.lr.peak is null: the first phase has no previous LR to continue from; set a value"
        if lr.peak is not None and not 0 < lr.peak <= 1:
            yield f"{key}.lr.peak={lr.peak} must be in (0, 1]"
        if lr.end is None and not 0 <= lr.end_ratio <= 1:
            yield f"{key}.lr.end_ratio={lr.end_ratio} must be in [0, 1]: end = peak x ratio, a phase decays"
        # a continuing phase (peak null) decays from where the previous one ends (run alone: known at start)
        top, bound = (lr.peak, f"lr.peak({lr.peak})") if lr.peak is not None else (1, "1")
        if lr.peak is None and i:
            top = levels(plist)[i][0]
            bound = f"{top:g}, where phase.{plist[i - 1].name} ends"
        if lr.end is not None and not 0 <= lr.end <= top:
            yield (f"{key}.lr.end={lr.end} must be in [0, {bound}]: a phase decays, it does not climb "
                   f"(or leave lr.end null: peak x lr.end_ratio)")
        if not 0 <= lr.warmup_fraction < 1:
            yield f"{key}.lr.warmup_fraction={lr.warmup_fraction} must be in [0, 1)"
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
    if d.packing not in ("best_fit", "concat"):
        yield f"data.packing={d.packing!r} must be best_fit or concat"
    if not 0 <= d.val_fraction < 1:
        yield f"data.val_fraction={d.val_fraction} must be in [0, 1)"
    if d.num_shards < 1:
        yield f"data.num_shards={d.num_shards} must be >= 1"
    if d.tokenizer.path is None and not d.tokenizer.train:
        yield "data.tokenizer: no path and train=false; give data.tokenizer.path=... or set data.tokenizer.train=true"
    elif d.tokenizer.path is not None and not Path(d.tokenizer.path).is_file():
        yield f"data.tokenizer.path: no such file {d.tokenizer.path!r}"
    if d.tokenizer.vocab_size != m.vocab_size:
        yield f"data.tokenizer.vocab_size({d.tokenizer.vocab_size}) != model.vocab_size({m.vocab_size})"
    for name, src in d.sources.items():
        if src.builtin is None and not src.paths:
            yield f"data.sources.{name}: no paths and no builtin generator; give data.sources.{name}.paths=[...]"
        for path in src.paths:
            if not _exists(path):
                yield f"data.sources.{name}.paths: no such file or directory {path!r}"


def _exists(path: str) -> bool:
    import glob
    return Path(path).exists() or bool(glob.glob(path))


def _run(cfg) -> Iterator[str]:
    from pretrain.resilience.config import problems as resilience_problems
    yield from resilience_problems(cfg.resilience)
    if cfg.launcher not in LAUNCHERS:
        yield f"launcher={cfg.launcher!r} must be one of {', '.join(LAUNCHERS)}"
    elif cfg.launcher == "local" and num_devices(cfg.hardware) > 1:
        yield (f"launcher=local trains in this one process, but hardware={cfg.hardware.name} has "
               f"{num_devices(cfg.hardware)} devices; use launcher=auto (msrun)")
