"""What the launcher does after a rank fails: restart, shrink, or give up (pretrain.launch.msrun).

RestartBudget is torchrun's --max-restarts over a sliding window: up to resilience.max_restarts
restarts within resilience.restart_window seconds. With resilience.elastic the budget's end is not
the run's end: the rank that failed most often in the window is left out and the job goes on with
the largest data-parallel size the remaining devices allow (shrunk_dp), never below
hardware.min_devices, with the same global batch (grad_accum re-derived) and a fresh budget.
The data order is defined by global sample index (pretrain.data.loader), so no sample is
repeated or skipped across the change.
"""
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, List, Optional, Tuple

from omegaconf import DictConfig, OmegaConf

from pretrain.config.errors import PretrainRunError
from pretrain.config.layout import ParallelLayout, engine_of
from pretrain.config.resilience import require, restart_problems
from pretrain.config.resolved import ResolvedRun
from pretrain.resilience.checkpoint import CheckpointManager
from pretrain.train.metrics import read_metrics

# lazy imports (pretrain.engine.mindformers): +~400 ms and numpy on every dry run; only its runs need it

USER_ERROR_EXIT = 2        # a rank refused its input: restarting cannot help
GAVE_UP_EXIT = 75          # EX_TEMPFAIL, as the watchdog: the run is resumable, retry it elsewhere/later


class RestartsExhausted(PretrainRunError):
    """The restart budget is spent (and no shrink is possible): the launch ends with GAVE_UP_EXIT."""
    exit_code = GAVE_UP_EXIT


@dataclass(frozen=True)
class Failure:
    rank: int
    exit: Optional[int]    # None: the rank vanished without an exit status (kill -9, OOM killer)
    message: str
    cause: str = "rank"    # rank | scheduler (its port taken) | timeout (no heartbeat) | node | stall

    @property
    def retryable(self) -> bool:
        return self.exit != USER_ERROR_EXIT


class RestartBudget:
    @classmethod
    def of(cls, res: Any) -> "RestartBudget":
        """The budget the run config's resilience block sets (its rule: config/resilience.py)."""
        require(restart_problems(res.max_restarts, res.restart_window))
        return cls(int(res.max_restarts), float(res.restart_window))

    def __init__(self, max_restarts: int, window_s: float, clock: Callable[[], float] = time.monotonic):
        self.max_restarts, self.window_s, self.clock = int(max_restarts), float(window_s), clock
        self._spent: List[Tuple[float, int]] = []   # (when, failed rank)

    def _recent(self) -> List[Tuple[float, int]]:
        now = self.clock()
        self._spent = [(t, r) for t, r in self._spent if now - t <= self.window_s]
        return self._spent

    def allows(self) -> bool:
        """One more restart fits in the window."""
        return len(self._recent()) < self.max_restarts

    def spend(self, rank: int) -> int:
        """Record a restart for a failure of `rank`; returns the restarts now in the window."""
        self._spent.append((self.clock(), rank))
        return len(self._recent())

    def worst_rank(self, latest: int) -> int:
        """The rank that failed most often in the window (ties: `latest`, the one failing now)."""
        counts = Counter(r for _, r in self._recent())
        counts[latest] += 1
        top = max(counts.values())
        return latest if counts[latest] == top else min(r for r, c in counts.items() if c == top)

    def reset(self) -> None:
        self._spent = []


def shrunk_dp(cfg: DictConfig, devices_left: int) -> Optional[int]:
    """The largest data-parallel size that fits devices_left devices (each replica takes tp·pp·cp),
    divides the global batch into whole micro-batches, and keeps at least hardware.min_devices
    devices; None when there is none below the current size."""
    p, gbs = cfg.parallel, int(cfg.train.global_batch_size)
    per_replica = ParallelLayout.from_config(cfg).group_sizes()["replica"]
    floor = int(cfg.hardware.get("min_devices", 1) or 1)
    for dp in range(min(int(p.dp) - 1, devices_left // per_replica), 0, -1):
        if gbs % (int(p.micro_batch_size) * dp) == 0 and dp * per_replica >= floor:
            return dp
    return None


def with_dp(cfg: DictConfig, dp: int) -> DictConfig:
    """cfg (resolved) on dp replicas of one host: the same global batch, grad_accum re-derived as
    conf/config.yaml derives it, devices_per_node the devices those replicas take."""
    out = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    p = out.parallel
    out.parallel.dp = dp
    out.train.grad_accum = int(out.train.global_batch_size) // (int(p.micro_batch_size) * dp)
    out.hardware.devices_per_node = ParallelLayout.from_config(out).world_size
    return out


def steps_lost(run_dir: Path, cfg: Optional[DictConfig] = None) -> Tuple[Optional[int], Optional[int]]:
    """(last step the run logged, newest checkpoint's step): the steps between them train again.
    MindFormers' engine (cfg given): those of the phase in progress, from its own loss log and
    checkpoints (pretrain.engine.mindformers.steps_lost)."""
    if cfg is not None and engine_of(cfg) == "mindformers":
        from pretrain.engine.mindformers import steps_lost as phase_steps_lost
        return phase_steps_lost(ResolvedRun.of(cfg))
    metrics = run_dir / "metrics.jsonl"
    records = read_metrics(metrics) if metrics.is_file() else []
    trained = [int(r["step"]) for r in records if r["kind"] == "train"]
    saved = CheckpointManager(run_dir / "checkpoints", keep_latest=1, writes_run_files=False).list()
    return (max(trained) if trained else None), (saved[0].step if saved else None)
