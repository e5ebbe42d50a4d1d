"""What a phase measured of itself, set beside what the plan said: step time, tokens/s, peak host
memory and checkpoint save time (summary.json, the printed summary, plan.json, the calibration a run
records). The first step a process runs compiles the graph: it is left out of the step time, and so
are the WARMUP_STEPS after it where the phase has steps to spare: on this CPU the first 4-8 of them ran
20-40% slower than the steady step a month-long run is made of (measured on one shape: 0.12-0.15 s,
then 0.085-0.095 s)."""
import os
import resource
import statistics
from typing import Any, Dict, List, Optional

WARMUP_STEPS = 8   # after the compiling step: the probe times after them, a phase leaves them out


def peak_rss_gb() -> float:
    """This process's peak resident memory so far (rank 0's: the one that writes the summary)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


def calibration_peak_gb(cfg: Any) -> float:
    """The peak memory a calibration point records: this process's on CPU (there the device's memory
    is the host's), 0 on an accelerator (its memory is not read here)."""
    return peak_rss_gb() if str(cfg.hardware.device) == "cpu" else 0.0


class PhaseMeter:
    def __init__(self, saves_before: int):
        self.warming: List[float] = []   # the WARMUP_STEPS after the compiling step
        self.steady: List[float] = []    # the steps after those
        self.saves_before = saves_before   # index into the trainer's save_times where this phase starts

    def step(self, record: Dict[str, Any], steps_run: int) -> None:
        """`steps_run`: the training steps this process has run, this one included."""
        if steps_run > 1:   # its first compiled the graph
            settled = steps_run > 1 + WARMUP_STEPS
            (self.steady if settled else self.warming).append(float(record["step_time_s"]))

    def result(self, tokens_per_step: int, save_times: List[float]) -> Dict[str, Optional[float]]:
        # a phase too short to spare the warm-up: all its steps after the compile
        timed = self.steady if len(self.steady) >= WARMUP_STEPS else self.warming + self.steady
        median = statistics.median(timed) if timed else None
        saves = save_times[self.saves_before:]
        return {"step_s": median, "tokens_per_s": tokens_per_step / median if median else None,
                "memory_gb": peak_rss_gb(), "save_s": statistics.median(saves) if saves else None,
                "steps_timed": len(timed), "host_load": host_load()}


def host_load() -> Dict[str, float]:
    """The host's 1-minute load average and its cores: a step measured while other work shares the cores
    is not the plan's step (the summary says so beside a time that is off)."""
    return {"load": round(os.getloadavg()[0], 2), "cores": os.cpu_count() or 1}


def note_allreduce(results: List[Dict[str, Any]], allreduce_s: Optional[float]) -> None:
    """Each phase's measured gradient all-reduce (timed once after training: the phases share one
    shape) and its share of the measured step; nothing with one data-parallel rank."""
    if allreduce_s is None:
        return
    for r in results:
        m = r["measured"]
        m["comm_s"] = allreduce_s
        m["comm_share"] = allreduce_s / m["step_s"] if m.get("step_s") else None


def planned(plan: Any) -> Dict[str, Any]:
    """The plan's figures that a run measures too (per device; memory with the measured fixed part)."""
    return {"step_s": plan.step_s, "tokens_per_s": plan.tokens_per_s, "memory_gb": plan.process_gb,
            "save_s": plan.checkpoint.write_s, "comm_s": plan.comm.exposed_s,
            "source": plan.calibration or f"assumed train.efficiency={plan.efficiency:g}"}


def of_run(results: List[Dict[str, Any]]) -> Dict[str, Optional[float]]:
    """The run's step time after compile (its phases' medians weighted by their timed steps: the phases
    of a run share one shape) and peak host memory; summary.json's "measured", a sweep row's columns."""
    timed = [r["measured"] for r in results if (r.get("measured") or {}).get("step_s")]
    if not timed:
        return {"step_s": None, "memory_gb": None}
    return {"step_s": sum(m["step_s"] * m["steps_timed"] for m in timed) / sum(m["steps_timed"] for m in timed),
            "memory_gb": max(m["memory_gb"] for m in timed)}
