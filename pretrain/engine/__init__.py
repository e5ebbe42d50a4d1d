"""The training engines: `train(run)` is the one rank entry, used by msrun's workers
(pretrain.worker) and by the one-device launch in its own process (pretrain.launch.start) alike. It
trains a resolved run on the engine its layout picks (pretrain.config.layout.choose_engine): our loop
(pretrain.train.loop) or MindFormers' own trainer on the run's per-phase yamls
(pretrain.engine.mindformers). mindspore is imported only when training."""

from typing import Any, Dict, Optional

from pretrain.config.resolved import ResolvedRun

# lazy imports (pretrain.engine.mindformers, pretrain.train.loop): +~300 ms and numpy each on every dry run;
# only the engine that trains is loaded


def train(run: ResolvedRun, phase: Optional[str] = None, ready: Optional[Any] = None) -> Dict[str, Any]:
    """phase: the one phase to train (MindFormers' engine trains one phase per launch on several devices).
    ready: what the launcher made of the run in this process (pretrain.train.ready.Ready); None in a
    rank's own process, which checks its frozen config and readies the data itself."""
    if run.engine == "mindformers":
        from pretrain.engine.mindformers import train_rank as train_mindformers

        return train_mindformers(run, phase, checked=ready is not None)
    from pretrain.train.loop import train_rank

    return train_rank(run, ready)
