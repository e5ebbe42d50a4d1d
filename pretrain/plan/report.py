"""format_plan: the plan as a table a user reads in five seconds (printed before every launch)."""
from typing import Any, List

_PARTS = ("weights", "grads", "optim", "activ", "logits", "total")
ASSUMED_FRAMEWORK = ("assumed: hardware.runtime_gb + hardware.graph_activation_multiple x activations, "
                     "until a run or plan.calibrate=true measures it")


def _si(x: float) -> str:
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= size:
            return f"{x / size:.2f}{unit}" if unit in "BT" else f"{x / size:.1f}{unit}"
    return f"{x:.0f}"


def _flops(x: float) -> str:
    return f"{x / 1e9:.1f} GFLOP" if x >= 1e9 else f"{x / 1e6:.1f} MFLOP"


def _duration(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.2f} s"


def _memory(plan: Any) -> List[str]:
    digits = 1 if plan.peak_gb >= 10 else 3          # a CPU-sized model still shows its parts
    stages = [plan.memory_first] if plan.layout.pp == 1 else [plan.memory_first, plan.memory_last]
    rows = [f"memory GB  {'stage':<6} {'layers':>7} " + "".join(f"{h:>8}" for h in _PARTS)]
    for s in stages:
        parts = (s.weights_gb, s.grads_gb, s.optimizer_gb, s.activations_gb, s.logits_gb, s.total_gb)
        rows.append(f"           {s.stage:<6} {s.layers:>7} " + "".join(f"{x:>8.{digits}f}" for x in parts))
    verdict = (f"FITS ({plan.headroom_gb:.1f} GB headroom)" if plan.fits
               else f"DOES NOT FIT by {-plan.headroom_gb:.1f} GB")
    rows.append(f"           peak {plan.peak_stage} stage {plan.peak_gb:.{digits}f} of "
                f"{plan.capacity_gb:g} GB per device: {verdict}")
    rows.append(f"           note: {plan.naive_note}")
    if plan.framework_gb:
        rows.append(f"           process: {plan.process_gb:.{digits}f} GB with the framework's own "
                    f"{plan.framework_gb:.{digits}f} GB (its runtime and what its graphs keep; "
                    f"{plan.calibration or ASSUMED_FRAMEWORK})")
    return rows


def _comm(comm: Any) -> str:
    parts = [f"{k} {getattr(comm, k + '_gb'):.2f} GB {_duration(getattr(comm, k + '_s'))} "
             f"{'inter' if comm.inter_node[k] else 'intra'}-node"
             for k in ("dp", "tp", "pp", "ep") if getattr(comm, k + "_gb")]
    return "comm/step  " + (" | ".join(parts) or "none")


def _checkpoint(ck: Any) -> str:
    head = f"checkpoint {ck.gb_per_device:.1f} GB/device, write {_duration(ck.write_s)}; "
    if ck.interval_minutes is None:
        return head + "no failure rate set (hardware.failures_per_device_hour)"
    return head + (f"MTBF {ck.mtbf_hours:.1f} h -> save every {ck.interval_minutes:.0f} min "
                   f"(~{ck.interval_steps:.0f} steps), {ck.overhead:.1%} time lost to saves + failures")


def _target(t: Any, lay: Any) -> str:
    head = f"target     {t.days:g} days: "
    if not t.reachable:
        return head + (f"not reachable by data parallelism alone: dp is capped at {t.max_dp} by the global batch "
                       f"({t.devices} devices); raise train.global_batch_size or the model-parallel degrees")
    return head + (f"{t.devices} devices (dp{t.dp} x tp{lay.tp} pp{lay.pp} cp{lay.cp}), assuming the step time "
                   f"per replica holds")


_ENGINES = {
    "pretrain": "pretrain (this project's loop: one device or plain data parallel)",
    "mindformers": "mindformers (MindFormers' own trainer from run_dir/mindformers_<phase>.yaml: "
                   "model parallel, ZeRO)",
}


def _engine(plan: Any) -> str:
    return "engine     " + _ENGINES.get(plan.engine, plan.engine)


def _step_source(plan: Any) -> str:
    if plan.calibration:
        return f"(step time {plan.calibration}; `plan.calibrate=true` measures again)"
    return (f"(assumed: train.efficiency={plan.efficiency:g} of peak while computing, less bubble and "
            f"exposed comm; `plan.calibrate=true` measures it)")


def format_plan(plan: Any) -> str:
    lay = plan.layout
    layout = (f"layout     dp{lay.dp} tp{lay.tp} pp{lay.pp} vpp{lay.vpp} cp{lay.cp} ep{lay.ep} = "
              f"{lay.world_size} devices; micro-batch {lay.micro_batch_size} x {lay.grad_accum:g}; "
              f"ZeRO-{lay.zero_stage}; SP {'on' if lay.sequence_parallel else 'off'}; "
              f"recompute {lay.recompute}; {lay.precision}"
              + (", fp32 grads" if lay.grad_fp32 and lay.precision != "fp32" else ""))
    hfu = f" (HFU {plan.hfu:.1%})" if lay.recompute == "full" else ""
    lines = [
        f"plan  {plan.model} | {plan.parallel} | {plan.hardware}",
        f"model      {_si(plan.params_total)} params ({_si(plan.params_active)} active), "
        f"{_flops(plan.flops_per_token)}/token at seq {plan.seq_length}",
        layout,
        _engine(plan),
        *_memory(plan),
        f"step       {_duration(plan.step_s)} (compute {_duration(plan.compute_s)}, "
        f"bubble {plan.bubble:.1%}, exposed comm {_duration(plan.comm.exposed_s)})",
        f"throughput {_si(plan.tokens_per_s_device)} tokens/s/device, "
        f"{_si(plan.tokens_per_s)} tokens/s total, MFU {plan.mfu:.1%}{hfu} " + _step_source(plan),
        _comm(plan.comm),
        "time       " + " | ".join(f"{p.name} {_duration(p.days * 86400)} ({_si(p.tokens)} tokens)"
                                  for p in plan.phases) + f" | total {_duration(plan.total_days * 86400)}",
        *([_target(plan.target, plan.layout)] if plan.target else []),
        _checkpoint(plan.checkpoint),
        *(f"warning    {w}" for w in plan.warnings),
    ]
    return "\n".join(lines)
