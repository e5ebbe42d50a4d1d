"""This process's place in the job, from the variables msrun sets (RANK_ID, RANK_SIZE); a plain
`python -m pretrain` is rank 0 of 1. The one place the trainer and the data loader ask.

Also what keeps data-parallel ranks in step outside the compiled graph (a stop request every rank
acts on at the same step) and the evidence each rank leaves of what it trained (a digest of its
final weights, digests of the rows it was fed), which the launcher writes to its exit status.
"""

import hashlib
import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from pretrain.config.layout import ParallelLayout
from pretrain.train.measure import WARMUP_STEPS

# lazy imports (mindspore): by design, its 3-10 s import stays out of launches and dry runs

MAX_ROW_DIGESTS = 4096  # rows listed one by one in the evidence; the running digest covers all
STOP_CHECK_S = 1.0      # about how long a stop waits for the ranks' next agreed read
TIMED_READS = 16        # reads the ranks time together before agreeing how many apart their checks fall


def rank_info() -> Tuple[int, int]:
    return int(os.environ.get("RANK_ID", "0")), int(os.environ.get("RANK_SIZE", "1"))


def data_parallel_rank(layout: ParallelLayout) -> Tuple[int, int]:
    """(dp_rank, dp_size) of this process (the rule: ParallelLayout.dp_rank)."""
    rank, world = rank_info()
    return layout.dp_rank(rank, world), layout.dp


def writes_run_files() -> bool:
    """Rank 0 writes the run's metrics, plots, exports and checkpoints (ParallelLayout.writes_run_files)."""
    return ParallelLayout.writes_run_files(rank_info()[0])


def all_sum(value: float, degree: int) -> float:
    """`value` summed over the data-parallel ranks (host side, outside the compiled graph); every
    rank must call it at the same point. With one rank: `value`."""
    if degree <= 1:
        return float(value)
    return world_sum([value])[0]


def world_sum(values: Sequence[float]) -> List[float]:
    """`values` summed element-wise over the job's ranks (the world group: CPU's AllReduce only sums)."""
    import mindspore as ms
    from mindspore import ops

    return [float(x) for x in ops.AllReduce()(ms.Tensor(np.array(values, np.float32))).asnumpy()]


class AgreedStop:
    """A GracefulStop that every rank of the job reads the same way. A signal can reach one rank
    after it has passed a step boundary that another has not: stopping on the local flag would let
    one rank exit while the others wait forever in their next collective. Each read sums the flags
    over the world group (CPU's AllReduce only sums): every parallel group at once, data, tensor,
    pipeline and context parallel, so all ranks stop after the same step and rank 0 saves that
    step once. `degree`: the job's world size (rank_info()), not the data-parallel degree, which
    is 1 for a tensor-parallel-only layout.

    A read is a collective, and a small model's step is short: read at every step, it cost 2 ms of
    a 70 ms step here. So the ranks read the flags together every `every` reads, about STOP_CHECK_S
    apart: after the compile and the warm-up they time TIMED_READS reads, sum their times in the same
    collective as the flags, and each derives `every` from the same sum. Every rank reads at the same
    points (each step, each phase's start), so all of them check at the same ones."""

    def __init__(self, stop: Any, degree: int,
                 summed: Optional[Callable[[Sequence[float]], List[float]]] = None):
        self._stop = stop
        self.degree = int(degree)
        self.every = 1            # reads apart that the ranks check: agreed at read `_agree_at`
        self._reads = 0
        self._start_at = 2 + WARMUP_STEPS       # the phase's read, the compiling step's, the warm-up
        self._agree_at = self._start_at + TIMED_READS
        self._timed_from = 0.0
        self._sum = summed or world_sum   # a test's stand-in for the collective

    @property
    def requested(self) -> bool:
        """Read once per step (and at each phase's start) on every rank: each read counts."""
        local = bool(self._stop.requested)
        if self.degree <= 1:
            return local
        self._reads += 1
        if self._reads == self._start_at:
            self._timed_from = time.monotonic()
        if self._reads == self._agree_at:
            flags, elapsed = self._sum([float(local), time.monotonic() - self._timed_from])
            per_read = elapsed / self.degree / TIMED_READS
            self.every = max(1, round(STOP_CHECK_S / per_read)) if per_read > 0 else 1
            return flags > 0
        if self._reads > self._agree_at and (self._reads - self._agree_at) % self.every:
            return False
        return self._sum([float(local)])[0] > 0

    @property
    def signal_name(self) -> str:
        # a rank stopping for a peer's signal names it as the scheduler's usual one
        return self._stop.signal_name or "SIGTERM"


def agreed_stop(stop: Any) -> "AgreedStop":
    """`stop` read the same way by every rank of this job (all parallel groups: the world)."""
    return AgreedStop(stop, rank_info()[1])


class RowLog:
    """Digests of the training rows this rank was fed, in order: `watch(loader)` returns a loader
    that records each batch it serves. Constant memory: a running sha256 over every row plus the
    first MAX_ROW_DIGESTS row digests."""

    def __init__(self) -> None:
        self.rows = 0
        self.first: List[str] = []
        self._all = hashlib.sha256()

    def watch(self, loader: Any) -> "_Watched":
        return _Watched(loader, self)

    def record(self, input_ids: Any) -> None:
        for row in input_ids:
            digest = hashlib.sha256(row.tobytes()).hexdigest()[:16]
            self._all.update(digest.encode())
            if len(self.first) < MAX_ROW_DIGESTS:
                self.first.append(digest)
            self.rows += 1

    def evidence(self) -> Dict[str, Any]:
        return {"rows": self.rows, "rows_sha256": self._all.hexdigest(), "row_digests": self.first}


class _Watched:
    def __init__(self, loader: Any, log: RowLog):
        self._loader, self._log = loader, log

    def batch(self, step: int) -> Dict[str, Any]:
        out = self._loader.batch(step)
        self._log.record(out["input_ids"])
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


def params_digest(net: Any) -> str:
    """sha256 over the trainable parameters (names and fp32 bytes, in name order): data-parallel
    replicas that stayed identical have the same digest."""

    digest = hashlib.sha256()
    for p in sorted(net.trainable_params(), key=lambda p: p.name):
        digest.update(p.name.encode())
        digest.update(np.ascontiguousarray(p.asnumpy(), dtype=np.float32).tobytes())
    return digest.hexdigest()
