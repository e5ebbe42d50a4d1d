"""MindSpore's graph compile cache for the ranks a launcher starts, so a restart does not compile
again: RUN_DIR/compile_cache/<key>/rank_<r>/ (MS_COMPILER_CACHE_ENABLE / MS_COMPILER_CACHE_PATH).

Measured on CPU with MindSpore 2.9.0 (the shrunken tiny model, one process): the first step took
7.6 s without the cache, 8.6 s filling it, 1.3 s reading it, and the losses of every step were
bitwise the same in the three runs. Every restart of a job (the controller's, msrun's) starts its
ranks again, so from the second start on each rank skips its compile.
The key is a hash of the frozen config less what changes between starts of the same job (the
master port and address): a config changed on resume, or a layout shrunk by resilience.elastic,
compiles into a directory of its own instead of meeting a graph built for another one. MindSpore
itself keys the cache on the Python sources the graph was built from (compile_dependency.hash).
A user's own MS_COMPILER_CACHE_* settings win.
"""
import hashlib
from pathlib import Path
from typing import Dict

from omegaconf import DictConfig, OmegaConf

DIR = "compile_cache"
_VOLATILE = ("master_port", "master_addr")


def key(cfg: DictConfig) -> str:
    plain = OmegaConf.to_container(cfg, resolve=True)
    hw = dict(plain.get("hardware") or {})
    for k in _VOLATILE:
        hw.pop(k, None)
    plain = {**plain, "hardware": hw}
    return hashlib.sha256(OmegaConf.to_yaml(OmegaConf.create(plain)).encode()).hexdigest()[:16]


def env(cfg: DictConfig, run_dir: Path, base: Dict[str, str]) -> Dict[str, str]:
    """The variables to add to `base` (the ranks' environment) for the cache; none when the user
    set them."""
    if any(k.startswith("MS_COMPILER_CACHE") for k in base):
        return {}
    return {"MS_COMPILER_CACHE_ENABLE": "1",
            "MS_COMPILER_CACHE_PATH": str(Path(run_dir).resolve() / DIR / key(cfg))}
