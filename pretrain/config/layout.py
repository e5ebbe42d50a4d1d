"""One parallel layout (like torchtitan's ParallelDims): the single source for the job's sizes, which
engine runs them, where each rank sits, which rows it reads and which checkpoint files it writes.

Pure Python, no mindspore. A run resolves it once (pretrain/config/resolved.py) and hands it to the
planner, the launch, the loader and the checkpoint manager; what takes a bare config (the
MindFormers export and model builder, the launcher's restarted or shrunk generations) asks
`ParallelLayout.from_config(cfg)`: nothing multiplies cfg.parallel itself (tests/test_layout.py
checks each against it for every conf/parallel option).

Rank order is MindSpore's device order, which MindFormers' dataset sharding also uses: pipeline
stages outermost (world // pp consecutive ranks per stage), then data parallel, then the tp·cp ranks
of one replica's stage, which read the same data. The data order is one sequence of global sample
slots (pretrain/data/loader.py): step k's global batch of G = per-rank rows x dp is slots
k·G .. k·G+G-1, and data-parallel rank d reads the d-th run of per-rank rows of them.
"""
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

# lazy imports (numpy): +~160 ms on every dry run, for one placement table

ENGINES = ("auto", "pretrain", "mindformers")
SIZES = ("dp", "tp", "pp", "cp", "ep", "vpp")


def choose_engine(chosen: str, parallel: Any) -> str:
    """Which engine trains a layout: `pretrain` (this project's loop: one device or plain data
    parallel without ZeRO) or `mindformers` (MindFormers' own trainer, from the per-phase yamls:
    tensor/pipeline/context/expert parallel and ZeRO). train.engine=auto picks by the layout."""
    if chosen != "auto":
        return chosen
    return "mindformers" if model_split(parallel) or int(parallel.zero_stage) > 0 else "pretrain"


def engine_of(cfg: Any) -> str:
    """Which engine trains a composed config (train.engine, or the layout's choice under auto)."""
    return choose_engine(str(cfg.train.get("engine", "auto")), cfg.parallel)


def num_devices(hw: Any) -> int:
    """Devices the hardware option has."""
    return int(hw.devices_per_node) * int(hw.num_nodes)


def world_size(p: Any) -> int:
    """Ranks a layout uses: dp·tp·pp·cp (experts are sharded inside dp·cp, not beside it)."""
    return int(p["dp"]) * int(p["tp"]) * int(p["pp"]) * int(p["cp"])


def grad_reduce_size(p: Any) -> int:
    """Ranks a dense gradient is reduced over, the data-parallel group: dp·cp (experts shard inside it)."""
    return int(p["dp"]) * int(p["cp"])


def virtual_stages(p: Any) -> int:
    """Pipeline stages the layers are split into: pp·vpp."""
    return int(p["pp"]) * int(p["vpp"])


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
    # how each rank computes its share of a step (what the planner sizes memory and time by)
    micro_batch_size: int = 1    # rows per micro-batch
    grad_accum: int = 1          # micro-batches per data-parallel rank per step (train.grad_accum)
    recompute: str = "none"      # none | selective | full
    sequence_parallel: bool = False
    pipeline_schedule: str = "1f1b"
    grad_fp32: bool = True       # fp32 main gradients
    precision: str = "bf16"      # hardware.precision
    flash_attention: bool = True   # Ascend's kernels never store the s² scores; the CPU path does

    @classmethod
    def from_config(cls, cfg: Any) -> "ParallelLayout":
        p, hw = cfg.parallel, cfg.hardware
        engine = engine_of(cfg)
        # A size below 1 (refused by the rules, validate.py) counts as 1, so the planner can still plan
        # an invalid config it is shown; grad_accum is floored by its resolver when the batch does not
        # divide (also refused). How a rank computes takes the schema's defaults where a partial
        # config (a relaunch's sizes alone) leaves them out.
        d = cls.__dataclass_fields__
        return cls(**{k: max(int(p[k]), 1) for k in SIZES}, zero_stage=int(p.zero_stage),
                   devices_per_node=int(hw.devices_per_node), num_nodes=int(hw.num_nodes), engine=engine,
                   micro_batch_size=max(int(p.get("micro_batch_size", 1)), 1),
                   grad_accum=max(int(cfg.train.get("grad_accum", 1)), 1),
                   recompute=str(p.get("recompute", d["recompute"].default)),
                   sequence_parallel=bool(p.get("sequence_parallel", False)),
                   pipeline_schedule=str(p.get("pipeline_schedule", d["pipeline_schedule"].default)),
                   grad_fp32=bool(p.get("grad_fp32", True)), precision=str(hw.get("precision", "bf16")),
                   flash_attention=str(hw.get("device", "")) != "cpu")

    # ------------------------------------------------------------------ sizes and groups
    @property
    def world_size(self) -> int:
        return world_size(self.__dict__)

    @property
    def devices(self) -> int:
        """Devices the hardware has (the rules require world_size == devices)."""
        return num_devices(self)

    @property
    def grad_reduce_size(self) -> int:
        return grad_reduce_size(self.__dict__)

    @property
    def virtual_stages(self) -> int:
        return virtual_stages(self.__dict__)

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
        return self.zero_stage >= 1 and self.grad_reduce_size > 1

    def group_sizes(self) -> Dict[str, int]:
        """Ranks in each communication group: one replica's stage is tp·cp ranks; a pipeline is pp
        stages; gradients are reduced over dp·cp (dense) and dp·cp/ep (experts)."""
        return {"dp": self.dp, "tp": self.tp, "pp": self.pp, "cp": self.cp, "ep": self.ep,
                "replica": self.tp * self.pp * self.cp, "stage": self.world_size // self.pp,
                "grad_reduce": self.grad_reduce_size, "expert_grad_reduce": self.grad_reduce_size // self.ep}

    # ------------------------------------------------------------------ ranks
    def dp_rank(self, rank: int, world: Optional[int] = None) -> int:
        """The data-parallel rank of global rank `rank` (of `world` ranks, default world_size)."""
        world = self.world_size if world is None else int(world)
        stage = max(1, world // self.pp)
        per_replica = max(1, stage // self.dp)
        return min((rank % stage) // per_replica, self.dp - 1)

    @property
    def rows_per_step(self) -> int:
        """Rows one data-parallel rank reads per optimizer step: micro_batch_size x grad_accum."""
        return self.micro_batch_size * self.grad_accum

    @staticmethod
    def sample_slots(dp_rank: int, dp_size: int, steps: Any, rows: int) -> Any:
        """The global sample slots data-parallel rank `dp_rank` of `dp_size` trains at optimizer steps
        `steps` (a numpy array), reading `rows` rows per step, in order: step k's global batch is
        slots k·rows·dp_size .. +rows·dp_size-1, and rank d reads the d-th run of `rows` of them."""
        import numpy as np

        first = np.asarray(steps)[:, None] * (rows * dp_size) + dp_rank * rows
        return (first + np.arange(rows)).ravel()

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
