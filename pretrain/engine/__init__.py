"""The training engines: `train(cfg)` runs the config on the engine the rulebook picks
(pretrain.config.validate.engine): our loop (pretrain.train.runner) or MindFormers' own trainer on
the run's per-phase yamls (pretrain.engine.mindformers). mindspore is imported only when training."""
from typing import Any, Dict

from omegaconf import DictConfig


def train(cfg: DictConfig) -> Dict[str, Any]:
    from pretrain.config.validate import engine
    if engine(cfg) == "mindformers":
        from pretrain.engine.mindformers import run
        return run(cfg)
    from pretrain.train.runner import run
    return run(cfg)
