"""plan(run): memory per device, step time, days per phase and checkpoint interval for one resolved
run (pretrain/config/resolved.py), before anything is launched. Pure Python; never imports
mindspore or mindformers.

The formulas live in formulas.py; this module maps the config onto them and states its
assumptions. It assumes a valid layout (pretrain/config/validate.py owns those rules) but guards
every division, so an invalid one still yields a plan instead of a crash.
"""
import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from pretrain.config.layout import ParallelLayout
from pretrain.config.resolved import ResolvedPhase, ResolvedRun
from pretrain.plan.calibration import Calibration, beyond_plan_gb
from pretrain.plan.formulas import (GB, ModelShape, ParamCount, activation_bytes_per_layer, bubble_fraction,
                                    bytes_per_param, checkpoint_overhead, chunks_in_flight, flops_per_token,
                                    group_spans_nodes, layer_params, model_shape, model_states,
                                    optimal_checkpoint_interval, param_count, ring_allreduce_bytes)
from pretrain.plan.report import format_plan

__all__ = ["ModelShape", "ParamCount", "Plan", "bubble_fraction", "flops_per_token", "format_plan",
           "model_shape", "param_count", "plan"]

# Fixed cost of one failure besides the lost work and reading the checkpoint back: rescheduling
# the job, process start, HCCL init and graph compilation of a large model.
RESTART_S = 600.0
BUBBLE_WARN = 0.20
COMM_WARN = 0.25          # exposed communication as a share of the step
HEADROOM_WARN = 0.10      # allocator fragmentation and workspaces usually need several GB


@dataclass(frozen=True)
class StageMemory:
    stage: str                   # first | last | only (pp == 1)
    layers: int
    params: float                # Φ: parameters this device holds
    weights_gb: float
    grads_gb: float
    optimizer_gb: float
    activations_gb: float
    logits_gb: float
    total_gb: float


@dataclass(frozen=True)
class Comm:
    """Bytes each device sends per optimizer step, the time on its link, and what the step waits for."""
    dp_gb: float
    tp_gb: float
    pp_gb: float
    ep_gb: float
    dp_s: float
    tp_s: float
    pp_s: float
    ep_s: float
    exposed_s: float
    inter_node: Dict[str, bool]  # which groups cross nodes (and so use inter_node_gbps)


@dataclass(frozen=True)
class PhaseDays:
    name: str
    tokens: float
    steps: float
    days: float


@dataclass(frozen=True)
class CheckpointPlan:
    gb_per_device: float         # this rank's checkpoint shard: fp32 weights + Adam m, v (checkpoint_shard_gb)
    write_s: float               # δ
    mtbf_hours: Optional[float]  # None when hardware.failures_per_device_hour is 0
    interval_minutes: Optional[float]
    interval_steps: Optional[float]
    overhead: Optional[float]    # expected share of wall time lost at that interval


@dataclass(frozen=True)
class Target:
    days: float                  # plan.target_days
    dp: int                      # the data-parallel size that finishes in time (same tp, pp, cp) ...
    devices: int                 # ... and the devices it takes
    max_dp: int                  # global batch / micro-batch: dp cannot grow past this
    reachable: bool


@dataclass(frozen=True)
class Plan:
    model: str
    parallel: str
    hardware: str
    layout: ParallelLayout
    params_total: int
    params_active: int
    flops_per_token: float
    seq_length: int
    memory_first: StageMemory
    memory_last: StageMemory
    peak_stage: str
    peak_gb: float
    capacity_gb: float
    fits: bool
    headroom_gb: float           # negative: does not fit by -headroom_gb
    naive_states_gb: float       # P·(weight+optimizer bytes)/devices: the "fully sharded states" figure
    naive_note: str
    bubble: float
    comm: Comm
    tokens_per_step: float
    compute_s: float
    step_s: float
    tokens_per_s_device: float
    tokens_per_s: float
    mfu: float
    hfu: float                   # counts the recomputed forward of recompute=full
    phases: Tuple[PhaseDays, ...]
    total_days: float
    checkpoint: CheckpointPlan
    efficiency: float            # train.efficiency: the assumed share of peak FLOP/s while computing
    target: Optional["Target"]   # the devices that finish within plan.target_days
    warnings: Tuple[str, ...]
    engine: str = "pretrain"     # which engine trains it (pretrain.config.layout.ParallelLayout.engine)
    calibration: Optional[str] = None   # "measured on <host>, <date> ..." when a calibration set the step
    framework_gb: float = 0.0    # the framework's measured memory per process beyond peak_gb (CPU):
                                 # its runtime and what its graphs keep beyond the planned activations

    @property
    def process_gb(self) -> float:
        """What one device's process should hold: the peak stage plus the framework's measured part."""
        return self.peak_gb + self.framework_gb

    @property
    def peak(self) -> StageMemory:
        return self.memory_first if self.peak_stage == self.memory_first.stage else self.memory_last

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


def _div(a: float, b: float) -> float:
    return a / b if b else 0.0


def _get(node: Any, key: str, default: Any = None) -> Any:
    value = getattr(node, key, default)
    return default if value is None else value


def _layers_on_rank(layers: int, lay: ParallelLayout, explicit: Optional[List[int]], rank: int) -> int:
    # Rank r runs virtual stages r, r+p, r+2p, ... of an explicit split; an even split that does not
    # divide is rounded up: the rank with the most layers is the one that must fit.
    if explicit and len(explicit) == lay.virtual_stages:
        return int(sum(explicit[rank::lay.pp]))
    return math.ceil(layers / lay.pp)


def _stage_params(shape: ModelShape, lay: ParallelLayout, layers: int, rank: int) -> Tuple[float, float]:
    """(dense, expert) parameters one device of pipeline rank `rank` holds. The first rank holds the
    embedding, the last the head and final norm; with pp > 1 a tied head is a second copy."""
    lp = layer_params(shape)
    first, last = rank == 0, rank == lay.pp - 1
    vh = shape.vocab * shape.hidden
    head = vh if not (shape.tie_embeddings and first) else 0
    outside = (vh if first else 0) + (head + shape.hidden if last else 0)
    return (layers * lp.dense + outside) / lay.tp, layers * lp.experts / (lay.ep * lay.tp)


def _stage_memory(shape: ModelShape, lay: ParallelLayout, explicit: Optional[List[int]], rank: int
                  ) -> StageMemory:
    layers = _layers_on_rank(shape.layers, lay, explicit, rank)
    dense, experts = _stage_params(shape, lay, layers, rank)
    per_param = bytes_per_param(lay.precision, lay.grad_fp32)
    # ZeRO shards over the data-parallel group (dp·cp, as Megatron's distributed optimizer does);
    # routed experts are replicated only dp·cp/ep times, so their states shard over that.
    group = lay.grad_reduce_size
    w, g, o = (a + b for a, b in zip(model_states(dense, lay.zero_stage, group, per_param),
                                      model_states(experts, lay.zero_stage, group / lay.ep, per_param)))
    scale = 2.0 if lay.precision == "fp32" else 1.0
    args = dict(micro_batch=lay.micro_batch_size, tp=lay.tp, sequence_parallel=lay.sequence_parallel,
                flash_attention=lay.flash_attention, cp=lay.cp, element_scale=scale)
    in_flight = chunks_in_flight(rank, lay.pp, lay.vpp, lay.grad_accum, lay.pipeline_schedule)
    layers_in_flight = in_flight * layers / lay.vpp
    acts = layers_in_flight * activation_bytes_per_layer(shape, recompute=lay.recompute, **args)
    if lay.recompute == "full" and layers:
        acts += activation_bytes_per_layer(shape, recompute="none", **args)   # the layer being recomputed
    last = rank == lay.pp - 1
    logits = shape.seq / lay.cp * lay.micro_batch_size * shape.vocab * 4.0 / lay.tp if last else 0.0
    stage = "only" if lay.pp == 1 else ("first" if rank == 0 else "last")
    parts = [w / GB, g / GB, o / GB, acts / GB, logits / GB]
    return StageMemory(stage, layers, dense + experts, *parts, total_gb=sum(parts))


def _comm(shape: ModelShape, lay: ParallelLayout, hw: Any, explicit: Optional[List[int]], compute_s: float
          ) -> Comm:
    dpn = max(int(_get(hw, "devices_per_node", 1)), 1)
    intra, inter = float(_get(hw, "intra_node_gbps", 10.0)), float(_get(hw, "inter_node_gbps", 10.0))
    t, cp, m = lay.tp, lay.cp, lay.grad_accum
    act = 4.0 if lay.precision == "fp32" else 2.0
    grad = bytes_per_param(lay.precision, lay.grad_fp32)[1]
    layers = max(_layers_on_rank(shape.layers, lay, explicit, r) for r in {0, lay.pp - 1})
    dense, experts = max((_stage_params(shape, lay, _layers_on_rank(shape.layers, lay, explicit, r), r)
                          for r in {0, lay.pp - 1}), key=sum)
    tokens = lay.micro_batch_size * shape.seq / cp                       # per micro-batch on this device
    sp_div = t if lay.sequence_parallel else 1
    # DP: gradient all-reduce (ZeRO-1/2: reduce-scatter + all-gather, same bytes); ZeRO-3 also
    # gathers the weights again for backward: 1.5x.
    dp = ring_allreduce_bytes(lay.grad_reduce_size, dense * grad)
    dp += ring_allreduce_bytes(lay.grad_reduce_size / lay.ep, experts * grad)
    dp *= 1.5 if lay.zero_stage >= 3 else 1.0
    # TP: 2 all-reduces forward + 2 backward per layer (SP's all-gather/reduce-scatter pairs move the
    # same bytes); full recompute repeats the forward's 2.
    collectives = 6 if lay.recompute == "full" else 4
    tp = collectives * layers * m * ring_allreduce_bytes(t, tokens * shape.hidden * act)
    # PP: activations forward and gradients backward at each chunk boundary; with SP each TP rank
    # sends only its sequence shard.
    pp = 2 * m * lay.vpp * tokens * shape.hidden * act / sp_div if lay.pp > 1 else 0.0
    # EP: all-to-all dispatch + combine, forward and backward, of each token's top-k copies.
    routed = tokens * shape.experts_per_token * shape.hidden * act / sp_div
    ep = 4 * layers * m * routed * (lay.ep - 1) / lay.ep if lay.ep > 1 and shape.num_experts else 0.0
    crosses = {"tp": group_spans_nodes(1, t, dpn), "dp": group_spans_nodes(t * cp, lay.dp, dpn),
               "ep": group_spans_nodes(t * cp, lay.ep, dpn),
               "pp": group_spans_nodes(t * cp * lay.dp, lay.pp, dpn)}
    secs = {k: _div(v, (inter if crosses[k] else intra) * GB) for k, v in
            {"dp": dp, "tp": tp, "pp": pp, "ep": ep}.items()}
    # Overlap assumption: the gradient reduce runs in buckets during the backward of the step's last
    # micro-batch (2/3 of its compute) and only the rest is exposed; TP, EP and PP transfers sit on
    # the critical path of every layer / stage boundary and are counted in full. On CPU MindSpore
    # runs the reducer after the backward pass: nothing is hidden.
    hidden_window = 0.0 if str(_get(hw, "device")) == "cpu" else compute_s / m * 2.0 / 3.0
    exposed = secs["tp"] + secs["ep"] + secs["pp"] + max(0.0, secs["dp"] - hidden_window)
    return Comm(dp / GB, tp / GB, pp / GB, ep / GB, secs["dp"], secs["tp"], secs["pp"], secs["ep"],
                exposed, crosses)


def _phase_days(phases: Tuple[ResolvedPhase, ...], tokens_per_step: float, tokens_per_s: float
                ) -> Tuple[PhaseDays, ...]:
    return tuple(PhaseDays(ph.name, ph.tokens, _div(ph.tokens, tokens_per_step),
                           _div(ph.tokens, tokens_per_s) / 86400) for ph in phases)


def checkpoint_shard_gb(lay: ParallelLayout, params: float) -> float:
    """What one rank writes: the fp32 parameters it holds (MindSpore's parameters are the fp32 masters;
    bf16 is only the compute cast) and its Adam m and v, as MindFormers' per-rank shards and our
    loop's checkpoints hold them. ZeRO (optimizer parallel) shards m, v over the data-parallel group
    from level 1 and the parameters too at level 3."""
    group = lay.grad_reduce_size
    weights = 4.0 * params / (group if lay.zero_stage >= 3 else 1)
    moments = 8.0 * params / (group if lay.zero_stage >= 1 else 1)
    return (weights + moments) / GB


def _checkpoint(cfg: Any, lay: ParallelLayout, peak: StageMemory, step_s: float) -> CheckpointPlan:
    hw = cfg.hardware
    gb = checkpoint_shard_gb(lay, peak.params)
    writers = min(max(int(_get(hw, "devices_per_node", 1)), 1), lay.world_size)
    write_s = gb * writers / float(_get(hw, "checkpoint_write_gbps", 2.0))
    rate = float(_get(hw, "failures_per_device_hour", 0.0)) * lay.world_size
    if rate <= 0 or write_s <= 0:
        return CheckpointPlan(gb, write_s, None, None, None, None)
    mtbf_s = 3600.0 / rate
    interval = optimal_checkpoint_interval(write_s, mtbf_s)
    overhead = checkpoint_overhead(interval, write_s, mtbf_s, RESTART_S + write_s)   # restart reads it back
    return CheckpointPlan(gb, write_s, mtbf_s / 3600.0, interval / 60.0, _div(interval, step_s), overhead)


def plan(run: ResolvedRun, calibration: Optional[Calibration] = None) -> Plan:
    """Plan one resolved run (its layout and phases; cfg.model/hardware/train). Pure: reads the run
    (and the calibration the caller loaded, pretrain.plan.calibration) only. Calibrated, the step is
    the fitted model of the measured steps of this hardware option, which include their
    communication; otherwise compute at train.efficiency of peak plus the modelled exposed
    communication."""
    cfg, lay = run.cfg, run.layout
    shape = model_shape(cfg.model)
    hw, train = cfg.hardware, cfg.train
    explicit = _get(cfg.parallel, "pipeline_layers")
    explicit = [int(x) for x in explicit] if explicit else None
    pc = param_count(shape)
    f2 = flops_per_token(shape)

    first = _stage_memory(shape, lay, explicit, 0)
    last = _stage_memory(shape, lay, explicit, lay.pp - 1) if lay.pp > 1 else first
    peak = last if last.total_gb > first.total_gb else first
    capacity = float(_get(hw, "memory_gb_per_device", 0.0))
    w, _, o = bytes_per_param(lay.precision, lay.grad_fp32)
    naive = pc.total * (w + o) / lay.world_size / GB

    peak_tflops = float(_get(hw, "peak_tflops", 0.0))
    tokens_per_step = float(_get(train, "global_batch_size", 0)) * shape.seq
    recompute_factor = _recompute_factor(lay)
    flops_per_step = _device_flops(cfg, shape, lay)
    if calibration is not None:
        compute_s = calibration.step_s(flops_per_step, shape.seq, lay.grad_accum)
    else:
        compute_s = _div(flops_per_step, peak_tflops * 1e12 * float(_get(train, "efficiency", 0.45)))
    bubble = bubble_fraction(lay.pp, lay.grad_accum, lay.vpp, lay.pipeline_schedule)
    comm = _comm(shape, lay, hw, explicit, compute_s)
    step_s = compute_s / (1.0 - bubble) + (comm.exposed_s if calibration is None else 0.0)
    tok_s = _div(tokens_per_step, step_s)
    mfu = _div(tok_s / lay.world_size * f2, peak_tflops * 1e12)
    days = _phase_days(run.phases, tokens_per_step, tok_s)
    ckpt = _checkpoint(cfg, lay, peak, step_s)

    fits = peak.total_gb <= capacity
    total_days = sum(p.days for p in days)
    target_days = _get(_get(cfg, "plan"), "target_days")
    target = _target(cfg, lay, total_days, float(target_days)) if target_days else None
    naive_note = (f"fully sharded model states alone are {naive:.3g} GB/device "
                  f"(P x {w + o:.0f} B / {lay.world_size} devices); that figure ignores gradients, "
                  f"activations and logits: the peak stage needs {peak.total_gb:.3g} GB")
    warnings = _warnings(cfg, lay, peak, capacity, naive, bubble, comm, step_s, ckpt)
    return Plan(model=str(cfg.model.name), parallel=str(_get(cfg.parallel, "name", "")),
                hardware=str(_get(hw, "name", "")), layout=lay, params_total=pc.total,
                params_active=pc.active, flops_per_token=f2, seq_length=shape.seq, memory_first=first,
                memory_last=last, peak_stage=peak.stage, peak_gb=peak.total_gb, capacity_gb=capacity,
                fits=fits, headroom_gb=capacity - peak.total_gb, naive_states_gb=naive, naive_note=naive_note,
                bubble=bubble, comm=comm, tokens_per_step=tokens_per_step, compute_s=compute_s, step_s=step_s,
                tokens_per_s_device=_div(tok_s, lay.world_size), tokens_per_s=tok_s, mfu=mfu,
                hfu=mfu * recompute_factor, phases=days, total_days=total_days, checkpoint=ckpt,
                efficiency=float(_get(train, "efficiency", 0.45)), target=target, warnings=tuple(warnings),
                engine=lay.engine, calibration=calibration.source if calibration else None,
                framework_gb=_framework_gb(calibration, hw, peak, lay) if str(_get(hw, "device")) == "cpu"
                else 0.0)


def _graphs(lay: ParallelLayout) -> int:
    """Training graphs one process compiles: the update cell, and the accumulate-only cell when a
    step accumulates micro-batches (on CPU each keeps its own intermediates)."""
    return 2 if lay.grad_accum > 1 else 1


def memory_split_gb(plan_: "Plan") -> Tuple[float, float]:
    """(model states, activations and logits once per compiled training graph) of the peak stage:
    the part of a process's memory that stays and the part that grows with the micro-batch, as a
    calibration point records them."""
    peak = plan_.peak
    acts = peak.activations_gb + peak.logits_gb
    return peak.total_gb - acts, acts * _graphs(plan_.layout)


def _framework_gb(calibration: Optional[Calibration], hw: Any, peak: StageMemory, lay: ParallelLayout) -> float:
    """What a CPU process holds beyond the planned peak: as its calibration measured, else as the hardware
    option assumes (hardware.runtime_gb, hardware.graph_activation_multiple)."""
    acts = peak.activations_gb + peak.logits_gb
    if calibration is not None:
        return calibration.beyond_plan_gb(acts, _graphs(lay))
    return beyond_plan_gb(float(_get(hw, "runtime_gb", 0.0)), float(_get(hw, "graph_activation_multiple", 1.0)),
                          acts, _graphs(lay))


def device_flops_per_step(run: ResolvedRun) -> float:
    """FLOPs one device computes per optimizer step (what a calibration point's step time is fitted to)."""
    return _device_flops(run.cfg, model_shape(run.cfg.model), run.layout)


def _recompute_factor(lay: ParallelLayout) -> float:
    return 4.0 / 3.0 if lay.recompute == "full" else 1.0    # one extra forward: HFU, not MFU


def _device_flops(cfg: Any, shape: ModelShape, lay: ParallelLayout) -> float:
    """Its share of the global batch's tokens x F2, with the recomputed forward of recompute=full."""
    tokens_per_step = float(_get(cfg.train, "global_batch_size", 0)) * shape.seq
    return tokens_per_step / lay.world_size * flops_per_token(shape) * _recompute_factor(lay)


def _target(cfg: Any, lay: ParallelLayout, days: float, target_days: float) -> Target:
    """More data-parallel replicas of the same layout, assuming the step time per replica holds (the
    global batch is split over more replicas, so each does less; a first-order estimate)."""
    model_parallel = lay.group_sizes()["replica"]
    max_dp = max(int(_div(float(_get(cfg.train, "global_batch_size", 1)), lay.micro_batch_size)), 1)
    dp = max(math.ceil(lay.dp * _div(days, target_days)), 1)
    return Target(target_days, min(dp, max_dp), min(dp, max_dp) * model_parallel, max_dp, dp <= max_dp)


def _warnings(cfg: Any, lay: ParallelLayout, peak: StageMemory, capacity: float, naive: float, bubble: float,
              comm: Comm, step_s: float, ckpt: CheckpointPlan) -> List[str]:
    out = []
    if peak.total_gb > capacity:   # the refusal itself is plan.verdict.memory_problems' line
        if naive <= capacity:
            out.append(f"the fully sharded states figure ({naive:.1f} GB/device) fits, but it ignores "
                       f"gradients, activations and logits")
    elif capacity - peak.total_gb < HEADROOM_WARN * capacity:
        out.append(f"tight: {capacity - peak.total_gb:.1f} GB headroom per device; allocator fragmentation "
                   f"and workspaces usually need several GB")
    if bubble > BUBBLE_WARN:
        out.append(f"pipeline bubble {bubble:.0%} (pp={lay.pp}, {lay.grad_accum:g} micro-batches): raise "
                   f"train.global_batch_size, lower pp, or use vpp > 1 / pipeline_schedule=zero_bubble")
    if step_s and comm.exposed_s / step_s > COMM_WARN:
        out.append(f"exposed communication is {comm.exposed_s / step_s:.0%} of the step")
    if comm.inter_node["tp"]:
        out.append(f"tp={lay.tp} spans nodes ({_get(cfg.hardware, 'devices_per_node')} devices per node): "
                   f"TP traffic runs on inter-node links")
    save_min = float(_get(cfg.train, "save_every_minutes", 0.0))
    if ckpt.interval_minutes and save_min > 2 * ckpt.interval_minutes:
        out.append(f"train.save_every_minutes={save_min:g} but the optimal interval for this failure rate is "
                   f"{ckpt.interval_minutes:.0f} min")
    return out


def largest_part(peak: StageMemory) -> Tuple[str, float]:
    parts = {"model states": peak.weights_gb + peak.grads_gb + peak.optimizer_gb,
             "activations": peak.activations_gb, "logits": peak.logits_gb}
    biggest = max(parts, key=parts.get)
    return biggest, parts[biggest]


def memory_cure(lay: ParallelLayout, biggest: str) -> str:
    """What to change, for the part of memory that dominates, skipping what the layout already does."""
    if biggest == "model states":
        return "raise parallel.zero_stage, tp or pp" if lay.zero_stage < 3 else "more tp, pp or devices"
    smaller_batch = ["a smaller parallel.micro_batch_size"] * (lay.micro_batch_size > 1)
    if biggest == "logits":
        return " or ".join(["more tp"] + smaller_batch)
    return ", ".join(["parallel.recompute=full"] * (lay.recompute != "full")
                     + ["parallel.sequence_parallel=true"] * (lay.tp > 1 and not lay.sequence_parallel)
                     + ["more tp or pp"] + smaller_batch)
