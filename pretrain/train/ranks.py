"""This process's place in the job, from the variables msrun sets (RANK_ID, RANK_SIZE); a plain
`python -m pretrain` is rank 0 of 1. The one place the trainer and the data loader ask."""

import os
from typing import Any, Tuple


def rank_info() -> Tuple[int, int]:
    return int(os.environ.get("RANK_ID", "0")), int(os.environ.get("RANK_SIZE", "1"))


def data_parallel_rank(cfg: Any) -> Tuple[int, int]:
    """(dp_rank, dp_size). Data parallel is the outermost dimension of the device layout, so the
    world // dp ranks of one model replica (its tp·pp·cp ranks) are consecutive and read the same data."""
    rank, world = rank_info()
    dp = int(cfg.parallel.dp)
    per_replica = max(1, world // dp)
    return min(rank // per_replica, dp - 1), dp


def is_logging_rank() -> bool:
    """Rank 0 writes the run's metrics, plots, exports and checkpoints."""
    return rank_info()[0] == 0
