"""What a checkpoint must share with the run that loads it, and the tag a phase's end is saved under.

Pure Python: the launcher checks a branch's base checkpoint (resume.check_branch) before anything
imports mindspore, and the loop checks every checkpoint it loads with the same rule."""
import hashlib
import json
from typing import Any, Dict

from omegaconf import OmegaConf

from pretrain.config.errors import PretrainRunError

# cfg.model keys that are not the architecture (recipe numbers, initialisation, length limits)
_NOT_ARCH = {
    "name",
    "global_batch_size",
    "total_tokens",
    "lr_peak",
    "init_method",
    "init_std",
    "seq_length",
    "max_position_embeddings",
}


def architecture(cfg: Any) -> Dict[str, Any]:
    """What a checkpoint must share with the model to be loaded into it."""
    model = OmegaConf.to_container(cfg.model, resolve=True)
    return {k: v for k, v in sorted(model.items()) if k not in _NOT_ARCH}


def architecture_hash(arch: Dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(arch, sort_keys=True).encode()).hexdigest()[:16]


def check_same_arch(saved: Dict[str, Any], current: Dict[str, Any], where: Any) -> None:
    for key in sorted(set(saved) | set(current)):
        if saved.get(key) != current.get(key):
            raise PretrainRunError(
                f"checkpoint {where} is of another architecture: model.{key}={saved.get(key)} "
                f"there, model.{key}={current.get(key)} in this run; use a run_dir trained "
                f"with this model or start a new run_dir"
            )


def final_tag(phase: str) -> str:
    """The never-pruned checkpoint a phase ends with; the next phase starts from it."""
    return f"phase-{phase}-final"
