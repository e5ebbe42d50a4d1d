"""What a checkpoint must share with the run that loads it, and the tag a phase's end is saved under.

Pure Python: the launcher checks a branch's base checkpoint (resume.check_branch) before anything
imports mindspore, and the loop checks every checkpoint it loads with the same rule."""
import hashlib
import json
from typing import Any, Dict, List, Tuple

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


def data_identity(prepared: Dict[str, Any]) -> Dict[str, Any]:
    """What a run trains on, saved with each checkpoint: the tokenizer's sha256 and, per prepared
    dataset (pretrain.data.prepare.Prepared), a hash of the content checksums its manifest lists for
    every train and val shard and index: the rows as written, not where or when they were built (the
    same data rebuilt in another cache has the same identity)."""
    datasets = {}
    for name, p in sorted(prepared.items()):
        m = p.manifest
        shards = [[s.get("sha256"), s.get("index_sha256")]
                  for split in ("train", "val") for s in m[split]["shards"]]
        datasets[name] = hashlib.sha256(json.dumps(shards).encode()).hexdigest()[:16]
    first = next(iter(prepared.values()))
    return {"tokenizer": str(first.manifest["tokenizer"]["sha256"])[:16], "datasets": datasets}


def data_changes(saved: Any, current: Dict[str, Any], where: Any, allow: bool) -> List[Tuple[str, Any, Any]]:
    """(what, checkpoint's, this run's) for each difference between the data a checkpoint was
    trained on (its state's "data", data_identity) and this run's. Without `allow`
    (resilience.allow_data_change) any difference, or a checkpoint that did not record its data, is
    one PretrainRunError line: the same token ids would mean other text, silently."""
    override = ("set resilience.allow_data_change=true to continue this run on the data as it is now "
                "(logged as a data_change event in events.jsonl), or use another run_dir for a new run")
    if not isinstance(saved, dict):
        if allow:
            return [("data", None, current)]
        raise PretrainRunError(f"checkpoint {where} was written by an older pretrain that did not record the "
                               f"tokenizer and data it was trained on, so this resume cannot tell whether "
                               f"they changed: {override}")
    changed: List[Tuple[str, Any, Any]] = []
    if saved.get("tokenizer") != current["tokenizer"]:
        changed.append(("tokenizer", saved.get("tokenizer"), current["tokenizer"]))
    old, new = saved.get("datasets") or {}, current["datasets"]
    for name in sorted(set(old) | set(new)):
        if old.get(name) != new.get(name):
            changed.append((f"dataset {name}", old.get(name), new.get(name)))
    if changed and not allow:
        what = ", ".join(f"{k} ({o or '<none>'} -> {n or '<none>'})" for k, o, n in changed)
        raise PretrainRunError(f"checkpoint {where} was trained on other data than this run prepared: {what} "
                               f"differ (the corpus changed, the tokenizer was retrained or "
                               f"data.tokenizer.path replaced; the same token ids would mean other text). "
                               f"Restore the data and tokenizer it was trained on, or {override}")
    return changed
