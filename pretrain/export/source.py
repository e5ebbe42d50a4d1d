"""Which checkpoint of a run dir is exported, and its model weights.

Our loop (run_dir/checkpoints/, pretrain/resilience/checkpoint.py): the newest checkpoint whose
manifest verifies (checkpoint.verify, the check a resume uses); `--step N` that step's, `--phase
NAME` the phase's final one (tag phase-NAME-final). A named checkpoint that does not verify is
refused with the reason; an unnamed newest one that does not is passed over for the next (a note
says so), as a resume would. Nothing in the run dir is moved or written (a reader, not the run).

MindFormers' trainer (run_dir/mindformers/<phase>/checkpoint/rank_<r>/): the checkpoint that rank 0's
meta.json names (the one MindFormers itself would resume from), or `--step N`'s file. Those files
carry no checksum (MindFormers writes none): they are read as they are. A run of one device, or of
data parallel (every rank holds the whole model), exports rank 0's file; a model-parallel run's
shards are refused until merged (the error names MindSpore's merge).

Either way only the model's weights are read: Adam moments, steps and LR stay behind.
"""
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from omegaconf import OmegaConf

from pretrain.config.errors import PretrainRunError
from pretrain.config.layout import mindformers_checkpoint_dir
from pretrain.export import safetensors_file
from pretrain.resilience.checkpoint import WEIGHTS, published, verify
from pretrain.resilience.identity import final_tag

# lazy imports (pretrain.engine.mindformers): +~200 ms (the data package) for a MindFormers run's file name

# The Mcore GPTModel's own parameters: an optimizer's state in the same file is named otherwise
# (adam_m.*, adam_v.*, global_step, learning_rate; MindFormers adds step_num, loss_scale, ...).
MODEL_ROOTS = ("embedding.", "decoder.", "output_layer.")
_MF_FILE = re.compile(r"_rank_0-(\d+)_(\d+)\.safetensors$")


@dataclass
class Checkpoint:
    engine: str                                  # "pretrain" or "mindformers"
    step: int
    path: Path                                   # a step_* directory, or a MindFormers .safetensors file
    weights: Dict[str, safetensors_file.StoredTensor]   # Mcore name -> its tensor in the file, not loaded
    state: Dict                                  # our state.json ({} for MindFormers)
    verified: bool                               # its sha256 matched a manifest


def load_frozen(run_dir: Path) -> Any:
    """The run's frozen config.yaml (what its ranks trained from); a broken one is one line."""

    try:
        return OmegaConf.load(Path(run_dir) / "config.yaml")
    except Exception as e:   # yaml's and OmegaConf's errors have no common base worth naming
        raise PretrainRunError(f"{Path(run_dir) / 'config.yaml'} does not load ({type(e).__name__}); restore "
                               f"it from a checkpoint's state.json (\"config\")") from None


def is_model_weight(name: str) -> bool:
    return name.startswith(MODEL_ROOTS)


def select(run_dir: Path, engine: str, step: Optional[int] = None, phase: Optional[str] = None,
           phases: Tuple[str, ...] = ()) -> Checkpoint:
    if engine == "mindformers":
        return _mindformers(run_dir, step, phase, phases)
    return _ours(run_dir / "checkpoints", step, phase)


def _ours(directory: Path, step: Optional[int], phase: Optional[str]) -> Checkpoint:
    found = published(directory)
    if not found:
        raise PretrainRunError(f"{directory}: no checkpoint to export (the run saved none yet; train it, or "
                               f"point at the run dir that holds its checkpoints)")
    if step is not None:
        found = [c for c in found if c.step == step]
        if not found:
            steps = sorted({c.step for c in published(directory)})
            raise PretrainRunError(f"--step {step}: no checkpoint of that step in {directory} (it has steps "
                                   f"{_listed(steps)})")
    if phase is not None:
        found = [c for c in found if c.tag == final_tag(phase)]
        if not found:
            raise PretrainRunError(f"--phase {phase}: no final checkpoint of phase {phase!r} in {directory} "
                                   f"(tagged {final_tag(phase)}: the phase has not finished)")
    named = step is not None or phase is not None
    skipped: List[str] = []
    for info in found:
        problem = verify(info.path)
        if problem is None:
            for line in skipped:
                print(f"note: {line}; exporting {info.path.name}, the newest that verifies", file=sys.stderr)
            state = json.loads((info.path / "state.json").read_text(encoding="utf-8"))
            weights = read_weights(info.path / WEIGHTS)
            return Checkpoint("pretrain", info.step, info.path, weights, state, True)
        if named and len(found) == 1:
            raise PretrainRunError(f"{info.path} does not verify ({problem}): refused, nothing exported")
        skipped.append(f"{info.path.name} does not verify ({problem})")
    raise PretrainRunError(f"no checkpoint in {directory} verifies, nothing exported: {'; '.join(skipped)}")


def _mindformers(run_dir: Path, step: Optional[int], phase: Optional[str],
                 phases: Tuple[str, ...]) -> Checkpoint:
    from pretrain.engine.mindformers import newest_checkpoint_file

    names = [phase] if phase else list(reversed(phases))   # unnamed: the last phase that saved one
    for name in names:
        ckpt_dir = mindformers_checkpoint_dir(run_dir, name)
        if not (ckpt_dir / "rank_0").is_dir():
            continue
        ranks = sorted(p.name for p in ckpt_dir.glob("rank_*"))
        if step is None:
            path = newest_checkpoint_file(ckpt_dir)
            if not path.is_file():
                raise PretrainRunError(f"{path}: named by {ckpt_dir / 'rank_0' / 'meta.json'} but missing")
        else:
            files = {_mindformers_step(p): p for p in (ckpt_dir / "rank_0").glob("*.safetensors")}
            if step not in files:
                raise PretrainRunError(f"--step {step}: no MindFormers checkpoint of that step in "
                                       f"{ckpt_dir / 'rank_0'} (it has steps {_listed(sorted(files))})")
            path = files[step]
        weights = read_weights(path)
        return Checkpoint("mindformers", _mindformers_step(path), path, weights, {"ranks": ranks}, False)
    where = mindformers_checkpoint_dir(run_dir, phase or "<phase>")
    raise PretrainRunError(f"{where}: no MindFormers checkpoint to export (rank_0/ missing"
                           f"{'' if phase else ' for every phase of the run'}; the run saved none yet)")


def _mindformers_step(path: Path) -> int:
    """The phase step MindFormers stored in the file (step_num): its name counts the steps of the
    start that wrote it, which after a resume is not the phase's step."""
    try:
        stored = safetensors_file.read(path, only=lambda name: name == "step_num").get("step_num")
        if stored is not None:
            return int(stored.load().reshape(-1)[0])
    except (OSError, safetensors_file.SafetensorsError):
        pass
    m = _MF_FILE.search(path.name)
    return int(m.group(2)) if m else -1


def read_weights(path: Path) -> Dict[str, safetensors_file.StoredTensor]:
    try:
        return safetensors_file.read(path, only=is_model_weight)
    except (OSError, safetensors_file.SafetensorsError) as e:
        raise PretrainRunError(f"{path}: unreadable ({e}); nothing exported") from None


def _listed(steps: List[int]) -> str:
    if not steps:
        return "none"
    return ", ".join(map(str, steps[-8:])) + ("" if len(steps) <= 8 else f" and {len(steps) - 8} older")
