"""The training engines: `train(cfg)` runs the config on the engine the rulebook picks
(pretrain.config.layout.engine_of): our loop (pretrain.train.loop) or MindFormers' own trainer on
the run's per-phase yamls (pretrain.engine.mindformers). mindspore is imported only when training."""

from typing import Any, Dict, Optional

from omegaconf import DictConfig


def train(cfg: DictConfig, phase: Optional[str] = None) -> Dict[str, Any]:
    """phase: the one phase to train (MindFormers' engine trains one phase per launch on several devices)."""
    from pretrain.config.layout import engine_of

    if engine_of(cfg) == "mindformers":
        from pretrain.engine.mindformers import run

        return run(cfg, phase)
    from pretrain.train.loop import run

    return run(cfg)
