"""Per-node launch scripts for runs that span several nodes, and a Slurm submit script.

Each node must start its own msrun, so the launch writes RUN_DIR/launch/node_<r>.sh (node r's
rank, world size, devices, master address/port, cluster timeout, and the directory the config's
relative paths are relative to) beside copies of launchers/msrun_node.sh and slurm.sbatch: a run
directory on shared storage carries everything a node needs. submit_slurm.sh submits all nodes as
one Slurm job instead (Slurm then picks the master: the first node of the allocation).
submit_ray_data.sh submits the data step as a Slurm job of its own first (launchers/ray_slurm.sbatch:
a Ray cluster across the allocation, `python -m pretrain.data` with this run's overrides on it), so
the training job finds its data prepared in the shared cache.
"""
import os
import shlex
import shutil
from pathlib import Path
from typing import List

from omegaconf import DictConfig

from pretrain.config.compose import launchers_dir
from pretrain.config.layout import ParallelLayout
from pretrain.config.resolved import ResolvedRun
from pretrain.launch.launches import engine_launches
from pretrain.launch.msrun import CLUSTER_TIME_OUT_S, command

# lazy imports (hydra): +~95 ms; a rank reads its frozen config without Hydra

SHOWN_NODES = 4   # a dry run lists this many nodes' commands (and the last)
_LOOPBACK = ("127.", "localhost", "::1")


def write_node_scripts(cfg: DictConfig, run_dir: Path) -> List[Path]:
    """RUN_DIR/launch/node_<r>.sh for every node, then submit_slurm.sh and submit_ray_data.sh."""
    hw = cfg.hardware
    run_dir = run_dir.resolve()
    out = run_dir / "launch"
    out.mkdir(parents=True, exist_ok=True)
    for name in ("msrun_node.sh", "slurm.sbatch", "ray_slurm.sbatch"):
        shutil.copy(Path(launchers_dir()) / name, out / name)
    workdir = shlex.quote(os.getcwd())
    world, per_node = ParallelLayout.from_config(cfg).devices, int(hw.devices_per_node)
    phases = shlex.quote(" ".join(phase_launches(cfg)))   # resolves the run: once, not once per node
    scripts = []
    for node in range(hw.num_nodes):
        script = out / f"node_{node}.sh"
        script.write_text(
            "#!/usr/bin/env bash\n"
            f"# Node {node} of {hw.num_nodes} ({hw.name}): ranks {node * per_node}..{(node + 1) * per_node - 1} "
            f"of {world}, one per device.\n"
            f"# Run on node {node}{' (the master: it hosts the msrun scheduler)' if node == 0 else ''}; "
            f"MASTER_ADDR / MASTER_PORT in the environment override the configured ones.\n"
            f"export WORKER_NUM={world} LOCAL_WORKER_NUM={per_node} NODE_RANK={node}\n"
            f"export MASTER_ADDR=${{MASTER_ADDR:-{hw.master_addr}}} MASTER_PORT=${{MASTER_PORT:-{hw.master_port}}}\n"
            f"export CLUSTER_TIME_OUT={CLUSTER_TIME_OUT_S}\n"
            # one msrun per phase (engine mindformers); the job controller names the one it starts
            f"export PHASES=${{PHASES-{phases}}}\n"
            f"cd {workdir}   # the frozen config's relative paths are relative to the launch directory\n"
            f'exec bash "$(dirname "$(readlink -f "$0")")/msrun_node.sh" {shlex.quote(str(run_dir))}\n')
        script.chmod(0o755)
        scripts.append(script)
    slurm = out / "submit_slurm.sh"
    slurm.write_text(
        "#!/usr/bin/env bash\n"
        f"# Submit all {hw.num_nodes} nodes ({per_node} devices each) as one Slurm job; the allocation's\n"
        f"# first node becomes the master. Arguments go to sbatch (e.g. --dependency=afterok:JOBID).\n"
        f"cd {workdir}\n"
        f'exec sbatch --nodes={hw.num_nodes} --chdir={workdir} "$@" '
        f"--export=ALL,LOCAL_WORKER_NUM={per_node},MASTER_PORT={hw.master_port},"
        f"PHASES={phases} "
        f'"$(dirname "$(readlink -f "$0")")/slurm.sbatch" {shlex.quote(str(run_dir))}\n')
    slurm.chmod(0o755)
    data = out / "submit_ray_data.sh"
    data.write_text(
        "#!/usr/bin/env bash\n"
        f"# Prepare this run's data on a Ray cluster across {hw.num_nodes} nodes of a Slurm allocation (one\n"
        f"# job; data.cache_dir must be shared by all nodes), before submit_slurm.sh: e.g.\n"
        f"#   jid=$(bash submit_ray_data.sh --parsable) && bash submit_slurm.sh --dependency=afterok:$jid\n"
        f"cd {workdir}\n"
        f'exec sbatch --nodes={hw.num_nodes} --chdir={workdir} "$@" '
        f'"$(dirname "$(readlink -f "$0")")/ray_slurm.sbatch" {shlex.join(data_overrides())}\n')
    data.chmod(0o755)
    return scripts + [slurm, data]


def data_overrides() -> List[str]:
    """The command-line overrides this run was composed with (so `python -m pretrain.data` composes
    the same data config), less the data engine's own, which ray_slurm.sbatch sets."""
    from hydra.core.hydra_config import HydraConfig
    if not HydraConfig.initialized():
        return []
    return [o for o in HydraConfig.get().overrides.task
            if not o.lstrip("+~").startswith(("data.engine=", "data.ray."))]


def phase_launches(cfg: DictConfig) -> List[str]:
    """The phases msrun_node.sh launches one by one ([] : one launch, our loop chains its phases)."""
    return [p for p in engine_launches(ResolvedRun.of(cfg)) if p]


def describe_nodes(cfg: DictConfig, run_dir: Path, *, written: bool) -> str:
    """How to start the nodes: the written scripts, or (dry run) each node's msrun command."""
    hw = cfg.hardware
    run_dir = run_dir.resolve()
    head = (f"{ParallelLayout.from_config(cfg).devices} ranks on {hw.num_nodes} nodes x {hw.devices_per_node} devices ({hw.name}); "
            f"master {hw.master_addr}:{hw.master_port}")
    nodes = list(range(hw.num_nodes))
    shown = nodes if len(nodes) <= SHOWN_NODES + 1 else nodes[:SHOWN_NODES] + nodes[-1:]
    lines = [head if written else f"would write {hw.num_nodes} node scripts to {run_dir / 'launch'}/; {head}"]
    for node in shown:
        if node == shown[-1] and len(shown) < len(nodes):
            lines.append(f"  ... nodes {SHOWN_NODES}..{hw.num_nodes - 2} alike")
        where = run_dir / "launch" / f"node_{node}.sh"
        lines.append(f"  node {node}: " + (f"bash {where}" if written else shlex.join(command(cfg, run_dir, node))))
    if written:
        lines.append(f"start each node_<r>.sh on node r (node 0 first: it hosts msrun's scheduler; all within "
                     f"{CLUSTER_TIME_OUT_S} s), run_dir on shared storage at the same path; or submit all "
                     f"nodes as one Slurm job: bash {run_dir / 'launch' / 'submit_slurm.sh'}")
        lines.append(f"data first on a Ray cluster across an allocation (optional; else rank 0 prepares it): "
                     f"bash {run_dir / 'launch' / 'submit_ray_data.sh'}")
    if hw.get("nodes_on_this_host", False):
        lines.append("hardware.nodes_on_this_host: the job controller runs every node here, each in a "
                     "network namespace of its own (pretrain/launch/controller.py)")
    elif str(hw.master_addr).startswith(_LOOPBACK):
        lines.append(f"note: hardware.master_addr={hw.master_addr} is this host's loopback, which the other nodes "
                     f"cannot reach: set hardware.master_addr=<node 0's address> (or export MASTER_ADDR on every "
                     f"node; the Slurm script finds it itself)")
    return "\n".join(lines)
