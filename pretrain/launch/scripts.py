"""Per-node launch scripts for runs that span several nodes, and a Slurm batch script.

The scripts live in RUN_DIR/launch/ beside a copy of launchers/msrun_node.sh, so a run
directory copied to shared storage carries everything a node needs to start its ranks.
"""
import shutil
from pathlib import Path
from typing import List

from omegaconf import DictConfig

from pretrain.config.compose import launchers_dir
from pretrain.config.validate import num_devices
from pretrain.launch.msrun import CLUSTER_TIME_OUT_S


def write_node_scripts(cfg: DictConfig, run_dir: Path) -> List[Path]:
    hw = cfg.hardware
    out = run_dir.resolve() / "launch"
    out.mkdir(parents=True, exist_ok=True)
    for name in ("msrun_node.sh", "slurm.sbatch"):
        shutil.copy(Path(launchers_dir()) / name, out / name)
    scripts = []
    for node in range(hw.num_nodes):
        script = out / f"node_{node}.sh"
        script.write_text(
            "#!/usr/bin/env bash\n"
            f"# Node {node} of {hw.num_nodes} ({hw.name}): starts ranks "
            f"{node * hw.devices_per_node}..{(node + 1) * hw.devices_per_node - 1} of {num_devices(hw)}.\n"
            f"export WORKER_NUM={num_devices(hw)} LOCAL_WORKER_NUM={hw.devices_per_node} NODE_RANK={node}\n"
            f"export MASTER_ADDR={hw.master_addr} MASTER_PORT={hw.master_port} CLUSTER_TIME_OUT={CLUSTER_TIME_OUT_S}\n"
            f'exec bash "$(dirname "$0")/msrun_node.sh" {run_dir.resolve()}\n')
        script.chmod(0o755)
        scripts.append(script)
    slurm = out / "submit_slurm.sh"
    slurm.write_text("#!/usr/bin/env bash\n"
                     f"# Submit all {hw.num_nodes} nodes as one Slurm job.\n"
                     f'exec sbatch --nodes={hw.num_nodes} --export=ALL,LOCAL_WORKER_NUM={hw.devices_per_node},'
                     f'MASTER_PORT={hw.master_port} "$(dirname "$0")/slurm.sbatch" {run_dir.resolve()}\n')
    slurm.chmod(0o755)
    return scripts + [slurm]
