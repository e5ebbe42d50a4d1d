"""The training engines: `train(run)` trains a resolved run on the engine its layout picks
(pretrain.config.layout.choose_engine): our loop (pretrain.train.loop) or MindFormers' own trainer on
the run's per-phase yamls (pretrain.engine.mindformers). mindspore is imported only when training."""

from typing import Any, Dict, Optional

from pretrain.config.resolved import ResolvedRun

# lazy imports (pretrain.engine.mindformers, pretrain.train.loop): +~300 ms and numpy each on every dry run;
# only the engine that trains is loaded


def train(run: ResolvedRun, phase: Optional[str] = None) -> Dict[str, Any]:
    """phase: the one phase to train (MindFormers' engine trains one phase per launch on several devices)."""
    if run.engine == "mindformers":
        from pretrain.engine.mindformers import run as train_mindformers

        return train_mindformers(run, phase)
    from pretrain.train.loop import run as train_here

    return train_here(run)
