"""One parallel layout (like torchtitan's ParallelDims): the single source for the job's sizes, which
engine runs them, where each rank sits, which rows it reads and which checkpoint files it writes.

Pure Python, no mindspore: the rules, the planner, the launcher, the MindFormers export, the loader
and the checkpoint manager all ask `ParallelLayout.from_config(cfg)` instead of multiplying
cfg.parallel themselves (tests/test_layout.py checks each against it for every conf/parallel option).

Rank order is MindSpore's device order, which MindFormers' dataset sharding also uses: pipeline
stages outermost (world // pp consecutive ranks per stage), then data parallel, then the tp·cp ranks
of one replica's stage, which read the same data. The data order is one sequence of global sample
slots (pretrain/data/loader.py): step k's global batch of G = per-rank rows x dp is slots
k·G .. k·G+G-1, and data-parallel rank d reads the d-th run of per-rank rows of them.
"""
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

ENGINES = ("auto", "pretrain", "mindformers")
SIZES = ("dp", "tp", "pp", "cp", "ep", "vpp")


def choose_engine(chosen: str, parallel: Any) -> str:
    """Which engine trains a layout: `pretrain` (this project's loop: one device or plain data
    parallel without ZeRO) or `mindformers` (MindFormers' own trainer, from the per-phase yamls:
    tensor/pipeline/context/expert parallel and ZeRO). train.engine=auto picks by the layout."""
    if chosen != "auto":
        return chosen
    return "mindformers" if model_split(parallel) or int(parallel.zero_stage) > 0 else "pretrain"


def num_devices(hw: Any) -> int:
    """Devices the hardware option has."""
    return int(hw.devices_per_node) * int(hw.num_nodes)


def world_size(p: Any) -> int:
    """Ranks a layout uses: dp·tp·pp·cp (experts are sharded inside dp·cp, not beside it)."""
    return int(p["dp"]) * int(p["tp"]) * int(p["pp"]) * int(p["cp"])


def model_split(p: Any) -> List[str]:
    """The ways the model itself is split, e.g. ["tp(4)", "pp(2)"]; [] for replicas only."""
    return [f"{k}({p[k]})" for k in ("tp", "pp", "cp", "ep") if p[k] > 1]


def mindformers_output_dir(run_dir: Any, phase: str) -> Path:
    """Where MindFormers' trainer writes one phase of the run (its output_dir)."""
    return Path(run_dir).resolve() / "mindformers" / phase


def mindformers_checkpoint_dir(run_dir: Any, phase: str) -> Path:
    """Its CheckpointMonitor's directory: a rank_<r>/ shard directory per rank under it."""
    return mindformers_output_dir(run_dir, phase) / "checkpoint"


@dataclass(frozen=True)
class ParallelLayout:
    dp: int
    tp: int
    pp: int
    cp: int
    ep: int
    vpp: int
    zero_stage: int
    devices_per_node: int
    num_nodes: int
    engine: str                  # "pretrain" | "mindformers" (train.engine=auto resolved)

    @classmethod
    def from_config(cls, cfg: Any) -> "ParallelLayout":
        p, hw = cfg.parallel, cfg.hardware
        engine = choose_engine(str(cfg.train.get("engine", "auto")), p)
        return cls(**{k: int(p[k]) for k in SIZES}, zero_stage=int(p.zero_stage),
                   devices_per_node=int(hw.devices_per_node), num_nodes=int(hw.num_nodes), engine=engine)

    # ------------------------------------------------------------------ sizes and groups
    @property
    def world_size(self) -> int:
        return world_size(self.__dict__)

    @property
    def devices(self) -> int:
        """Devices the hardware has (the rules require world_size == devices)."""
        return num_devices(self)

    @property
    def split(self) -> List[str]:
        return model_split(self.__dict__)

    @property
    def semi_auto(self) -> bool:
        """Data parallel alone on our loop runs in MindSpore's DATA_PARALLEL mode (every rank a full
        replica, our step all-reduces the gradients); any split of the model itself needs
        SEMI_AUTO_PARALLEL, and so does data parallel on MindFormers' trainer, which in DATA_PARALLEL
        mode resets parallel_config.data_parallel to 1 (BaseTrainer._check_global_batch_size_for_
        auto_parallel) and then fails its own world-size check when it builds the Mcore model."""
        return bool(self.split) or (self.engine == "mindformers" and self.dp > 1)

    @property
    def sharded_optimizer(self) -> bool:
        """ZeRO: MindSpore's optimizer parallel over each parameter's data-parallel group (dp·cp)."""
        return self.zero_stage >= 1 and self.dp * self.cp > 1

    def group_sizes(self) -> Dict[str, int]:
        """Ranks in each communication group: one replica's stage is tp·cp ranks; a pipeline is pp
        stages; gradients are reduced over dp·cp (dense) and dp·cp/ep (experts)."""
        return {"dp": self.dp, "tp": self.tp, "pp": self.pp, "cp": self.cp, "ep": self.ep,
                "replica": self.tp * self.pp * self.cp, "stage": self.world_size // self.pp,
                "grad_reduce": self.dp * self.cp, "expert_grad_reduce": self.dp * self.cp // self.ep}

    # ------------------------------------------------------------------ ranks
    def dp_rank(self, rank: int, world: Optional[int] = None) -> int:
        """The data-parallel rank of global rank `rank` (of `world` ranks, default world_size)."""
        world = self.world_size if world is None else int(world)
        stage = max(1, world // self.pp)
        per_replica = max(1, stage // self.dp)
        return min((rank % stage) // per_replica, self.dp - 1)

    @staticmethod
    def sample_slots(dp_rank: int, dp_size: int, step: int, rows: int) -> range:
        """The global sample slots data-parallel rank `dp_rank` of `dp_size` trains at optimizer step
        `step`, reading `rows` rows per step (micro_batch_size x grad_accum)."""
        first = step * rows * dp_size + dp_rank * rows
        return range(first, first + rows)

    @staticmethod
    def writes_run_files(rank: int) -> bool:
        """Rank 0 writes the run's metrics, plots, exports and (our loop) the checkpoints."""
        return rank == 0

    def checkpoint_dir(self, run_dir: Path, rank: int, phase: Optional[str] = None) -> Optional[Path]:
        """The checkpoint directory rank `rank` writes, None when it writes none. Our loop: rank 0
        writes run_dir/checkpoints/ (data-parallel replicas are identical). MindFormers' trainer:
        every rank writes its own shard, run_dir/mindformers/<phase>/checkpoint/rank_<r>/."""
        if self.engine == "mindformers":
            return mindformers_checkpoint_dir(run_dir, str(phase)) / f"rank_{rank}"
        return Path(run_dir) / "checkpoints" if self.writes_run_files(rank) else None
