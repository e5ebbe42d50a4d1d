"""Hand a frozen run to the process(es) that train it."""
import shutil
from pathlib import Path
from typing import Any, Dict

from omegaconf import DictConfig

from pretrain.config.errors import PretrainRunError
from pretrain.config.validate import num_devices


def launch(cfg: DictConfig, run_dir: Path) -> Dict[str, Any]:
    hw = cfg.hardware
    if hw.device == "ascend" and shutil.which("npu-smi") is None:
        raise PretrainRunError(
            f"hardware={hw.name} needs Ascend devices and this host has none (no npu-smi); "
            f"plan it here with dry_run=true and launch on the cluster")
    world = num_devices(hw)
    if world > 1:
        raise PretrainRunError(
            f"hardware={hw.name} runs {world} processes, which needs the msrun launcher; "
            f"use hardware=cpu for a single-process run")
    from pretrain.data.prepare import prepare
    prepare(cfg.data)
    from pretrain.train.runner import run
    return run(cfg)
