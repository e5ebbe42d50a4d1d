"""What a rank needs before it builds its model, made once per process: the data prepared and checked
against the model, its identity checked against the checkpoint the run continues from, the padding id.

The launcher makes it before any rank starts (pretrain.launch.start): a refusal is one line before
msrun starts, and the one-device run it trains in its own process is handed it, so nothing is done
twice. A rank msrun or a node script starts makes its own (pretrain.train.loop.train_rank), from the frozen
config it read (its `prepare` only reads the cache the launcher filled; on several nodes rank 0 fills it).
"""
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from pretrain.config.resolved import ResolvedRun
from pretrain.data.checks import check_prepared
from pretrain.data.prepare import prepare
from pretrain.resilience.checkpoint import read_state
from pretrain.resilience.identity import data_changes, data_identity
from pretrain.resilience.resume import Continuation
from pretrain.train.build import pad_token_id


@dataclass
class Ready:
    prepared: Dict[str, Any]          # dataset name -> pretrain.data.prepare.Prepared
    identity: Dict[str, Any]          # saved with every checkpoint (resilience.identity.data_identity)
    pad_token_id: int
    # where the run continues from, when the launcher looked (it had checkpoints); else the rank looks
    begin: Optional[Continuation] = None
    data_changed: List[Tuple[str, Any, Any]] = field(default_factory=list)   # allowed changes, to log


def data_ready(run: ResolvedRun, begin: Optional[Continuation] = None, progress: bool = True) -> Ready:
    """The run's data prepared (or read from the cache) and checked; with `begin`, refused when it is
    not the data its start checkpoint trained on (unless resilience.allow_data_change)."""
    prepared = prepare(run.cfg.data, progress=progress)
    check_prepared(run.cfg, prepared)
    ready = Ready(prepared, data_identity(prepared), pad_token_id(
        str(next(iter(prepared.values())).tokenizer_path)))
    if begin is not None:
        continues_from(ready, run, begin)
    return ready


def continues_from(ready: Ready, run: ResolvedRun, begin: Continuation) -> None:
    """Record where the run continues from and check its data against that checkpoint's."""
    start = begin[0]
    ready.begin = begin
    ready.data_changed = [] if start is None else data_changes(
        read_state(start.info).get("data"), ready.identity, start.info.path,
        bool(run.cfg.resilience.allow_data_change))
