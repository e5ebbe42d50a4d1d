"""Hand a frozen run to the process(es) that train it.

One device: train in this process. Several on this host: msrun, one `pretrain.worker` per
device. Several nodes: per-node scripts in RUN_DIR/launch/ (and a Slurm submit script), since
each node must start its own msrun. dry_run / launcher=print only say what would run.
"""
import shlex
import shutil
from pathlib import Path
from typing import Any, Dict

from omegaconf import DictConfig

from pretrain.config.errors import PretrainRunError
from pretrain.config.validate import num_devices


def launch(cfg: DictConfig, run_dir: Path, *, dry: bool = False) -> Dict[str, Any]:
    from pretrain.launch import msrun
    hw = cfg.hardware
    dry = dry or cfg.launcher == "print"
    if hw.num_nodes > 1:
        if dry:
            print(f"would write {hw.num_nodes} node scripts to {run_dir}/launch/; node 0 runs: "
                  f"{shlex.join(msrun.command(cfg, run_dir.resolve()))}")
            return {}
        from pretrain.launch.scripts import write_node_scripts
        scripts = write_node_scripts(cfg, run_dir)
        print(f"{num_devices(hw)} ranks on {hw.num_nodes} nodes: start {scripts[0]} on the master node "
              f"({hw.master_addr}), then node_<r>.sh on node r (same path on shared storage), "
              f"or submit them all with: bash {scripts[-1]}")
        return {}
    in_process = num_devices(hw) == 1 and cfg.launcher != "msrun"
    if dry:
        print("would run:", "in this process (pretrain.train.runner)" if in_process
              else shlex.join(msrun.command(cfg, run_dir.resolve())))
        return {}
    if hw.device == "ascend" and shutil.which("npu-smi") is None:
        raise PretrainRunError(
            f"hardware={hw.name} needs Ascend devices and this host has none (no npu-smi); "
            f"plan it here with dry_run=true and launch on the cluster")
    from pretrain.data.manifest import summary_table
    from pretrain.data.prepare import prepare
    print(summary_table(prepare(cfg.data)), flush=True)   # once, before any rank starts: ranks only read the cache
    if in_process:
        from pretrain.train.runner import run
        return run(cfg)
    return msrun.run_local(cfg, run_dir)
