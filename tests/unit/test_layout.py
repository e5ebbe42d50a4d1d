"""ParallelLayout is the one source of the job's sizes, ranks and writers: for every option in
conf/parallel, the rules, the planner, the launcher, the MindFormers export, the rank -> data
rule the loader uses and the checkpoint writers agree with it. Pure Python, no mindspore."""
import numpy as np
import pytest

from pretrain.config.layout import engine_of
from pretrain.config import validate
from pretrain.config.layout import ParallelLayout
from pretrain.config.resolved import ResolvedRun
from pretrain.engine import phases as engine_phases
from pretrain.launch import msrun, scripts, supervise
from pretrain.model import mindformers_config as mfc
from pretrain.plan.planner import plan
from pretrain.train import ranks
from tests.helpers.repo import options

# a hardware option of each size, so every layout composes onto as many devices as it uses
HARDWARE = {1: "cpu", 2: "cpu_2proc", 8: "ascend910b_1x8", 32: "ascend910b_4x8", 64: "ascend910b_8x8",
            1024: "ascend910b_128x8", 8192: "ascend910c_1024x8"}


def composed(compose_many, option):
    first = compose_many([f"parallel={option}"])
    world = ParallelLayout.from_config(first).world_size
    model = ["model=qwen3_30b_a3b"] if first.parallel.ep > 1 else ["model=llama3_70b"] if world > 2 else []
    return compose_many([f"parallel={option}", f"hardware={HARDWARE[world]}", *model])


def some_ranks(world):
    return sorted({0, 1, world // 3, world // 2, world - 2, world - 1} & set(range(world)))


@pytest.mark.parametrize("option", options("parallel"))
def test_every_consumer_agrees_with_the_layout(option, compose_many, monkeypatch, tmp_path):
    cfg = composed(compose_many, option)
    lay = ParallelLayout.from_config(cfg)
    p = cfg.parallel
    assert (lay.dp, lay.tp, lay.pp, lay.cp, lay.ep, lay.vpp) == (p.dp, p.tp, p.pp, p.cp, p.ep, p.vpp)
    assert lay.world_size == lay.devices == validate.num_devices(cfg.hardware)
    assert not [line for line in validate.problems(cfg) if line.startswith("parallel: dp(")]

    # the rules and the planner
    assert engine_of(cfg) == lay.engine
    planned = plan(ResolvedRun.of(cfg))
    assert planned.engine == lay.engine
    assert planned.layout == lay

    # the launcher: msrun's worker count, the node scripts, the elastic shrink's replica size
    assert f"--worker_num={lay.devices}" in msrun.command(cfg, tmp_path)
    if lay.num_nodes > 1:
        script = scripts.write_node_scripts(cfg, tmp_path)[0]
        assert f"WORKER_NUM={lay.devices} " in script.read_text() or script.name == "submit_slurm.sh"
    assert supervise.with_dp(cfg, 1).hardware.devices_per_node == lay.group_sizes()["replica"]

    # the MindFormers export
    blocks = mfc.parallel_blocks(cfg)
    pc = blocks["parallel_config"]
    assert (pc["data_parallel"], pc["model_parallel"], pc["pipeline_stage"], pc["context_parallel"],
            pc["expert_parallel"]) == (lay.dp, lay.tp, lay.pp, lay.cp, lay.ep)
    assert blocks["parallel"]["parallel_mode"] == (1 if lay.semi_auto else 0)
    assert mfc.is_semi_auto(cfg) == lay.semi_auto
    assert blocks["parallel"]["enable_parallel_optimizer"] is lay.sharded_optimizer
    assert blocks["use_parallel"] is (lay.world_size > 1)

    # rank -> data-parallel rank: every dp rank gets one replica's tp·pp·cp ranks
    counts = [0] * lay.dp
    for rank in range(lay.world_size):
        counts[lay.dp_rank(rank)] += 1
    assert counts == [lay.group_sizes()["replica"]] * lay.dp
    for rank in some_ranks(lay.world_size):
        monkeypatch.setenv("RANK_ID", str(rank))
        monkeypatch.setenv("RANK_SIZE", str(lay.world_size))
        assert ranks.data_parallel_rank(lay) == (lay.dp_rank(rank), lay.dp)
        assert ranks.writes_run_files() == lay.writes_run_files(rank) == (rank == 0)
        # which checkpoint files this rank writes: our loop's directory on rank 0, a shard per rank
        # under MindFormers' trainer
        where = lay.checkpoint_dir(tmp_path, rank, "general")
        if lay.engine == "mindformers":
            assert where == engine_phases.checkpoint_dir(tmp_path, "general") / f"rank_{rank}"
        else:
            assert where == (tmp_path / "checkpoints" if rank == 0 else None)

    # the rows a data-parallel rank reads per step (the loader's batch: pretrain.train.build.make_loader)
    assert lay.rows_per_step == int(p.micro_batch_size) * int(cfg.train.grad_accum)


def test_the_dp_slots_of_a_step_tile_the_global_batch():
    lay = ParallelLayout(dp=4, tp=2, pp=1, cp=1, ep=1, vpp=1, zero_stage=0, devices_per_node=8, num_nodes=1,
                         engine="mindformers")
    got = sorted(s for d in range(4) for s in lay.sample_slots(d, 4, np.array([3]), 5))
    assert got == list(range(3 * 20, 4 * 20))
    # pipeline stages outermost, then dp, then the tp ranks of one replica
    lay = ParallelLayout(dp=2, tp=2, pp=2, cp=1, ep=1, vpp=1, zero_stage=0, devices_per_node=8, num_nodes=1,
                         engine="mindformers")
    assert [lay.dp_rank(r) for r in range(8)] == [0, 0, 1, 1, 0, 0, 1, 1]
