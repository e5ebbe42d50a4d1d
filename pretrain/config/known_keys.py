"""Keys the schema does not know, named with the key that was probably meant.

Hydra's `+key=value` adds a key even to a typed (struct) node, so `+train.lr=1e-3` composes and is
then silently unused, and `+phase.lr.peak=3e-5` under phase=all adds a fourth "phase" that breaks
the run. `unknown(cfg)` names such keys, one line each (the rulebook's first rule, validate.problems); `+` stays the way to add entries to the open
mappings (phase.*.mix, data.sources). The same wording serves Hydra's own "not in struct" errors
(pretrain/config/cli_errors.py).
"""
import dataclasses
import difflib
from typing import Any, Iterable, Iterator, List, Optional

from omegaconf import DictConfig, OmegaConf



def suggest(key: str, known: Iterable[str]) -> Optional[str]:
    """The known dotted key closest to `key`: a sibling spelt nearly alike or extending it
    (train.lr -> train.lr_peak), else the same name under another group."""
    known = list(known)
    parent, _, leaf = key.rpartition(".")
    siblings = {k.rpartition(".")[2]: k for k in known if k.rpartition(".")[0] == parent}
    close = [siblings[name] for name in difflib.get_close_matches(leaf, list(siblings), n=1, cutoff=0.6)]
    close = close or [k for name, k in siblings.items() if name.startswith(leaf)][:1]
    close = close or [k for k in known if k.rpartition(".")[2] == leaf][:1]  # the key under another group
    return close[0] if close else None


def per_phase(key: str, phases: List[str], value: Any = None) -> str:
    """`phase.lr.peak` under the curriculum: there is one such key per phase."""
    rest = key.split(".", 1)[1]
    names = [f"phase.{name}.{rest}" for name in phases]
    listed = ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]
    shown = "..." if value is None else value
    example = phases[1] if len(phases) > 1 else phases[0]
    return (f"{key}={shown}: phase=all trains {len(names)} phases, each with its own "
            f"{rest.split('.')[0]}: set {listed}; or train one phase as a branch of the base run: "
            f"phase={example} {key}={shown}")


def is_curriculum(node: Any) -> bool:
    """The phase node of phase=all: a mapping of phase name -> phase config."""
    return isinstance(node, DictConfig) and "name" not in node


def unknown(cfg: DictConfig) -> List[str]:
    """One line per key of `cfg` that no schema field declares. An untyped config (a rank's frozen
    config.yaml, loaded without the schema) has nothing to judge by: it was checked when composed."""
    if _fields(cfg) is None:
        return []
    found = list(_undeclared(cfg, ""))
    if not found:
        return []
    known = [k for k in _paths(cfg, "") if not any(k == u or k.startswith(u + ".") for u in found)]
    phases = [k for k in cfg.phase if f"phase.{k}" not in found] if is_curriculum(cfg.phase) else []
    lines = []
    for key in found:
        value = OmegaConf.select(cfg, key)
        leaf = next(_paths(value, key), key) if isinstance(value, DictConfig) else key  # +a.b.c adds node a.b
        if phases and key.count(".") == 1 and key.startswith("phase."):
            lines.append(per_phase(leaf, phases, OmegaConf.select(cfg, leaf)))
            continue
        hint = suggest(leaf, known)
        lines.append(f"{leaf}: no such key in the schema (pretrain/config/schema.py), so nothing would "
                     f"read it" + (f"; did you mean {hint}?" if hint else ""))
    return lines


def _fields(node: DictConfig) -> Optional[set]:
    kind = OmegaConf.get_type(node)
    return {f.name for f in dataclasses.fields(kind)} if dataclasses.is_dataclass(kind) else None


def _undeclared(node: Any, prefix: str) -> Iterator[str]:
    """Dotted keys under `node` that its schema does not declare."""
    if not isinstance(node, DictConfig):
        return
    fields = _fields(node)
    curriculum = prefix == "phase." and fields is None
    for key, child in node.items_ex(resolve=False):
        path = f"{prefix}{key}"
        if fields is not None and key not in fields:
            yield path
        elif curriculum and _fields(child) is None:  # every entry of phase=all is a typed phase
            yield path
        else:
            yield from _undeclared(child, path + ".")


def _paths(node: Any, prefix: str) -> Iterator[str]:
    """Every dotted key under `node`, depth first (leaves after their parents)."""
    if not isinstance(node, DictConfig):
        return
    for key, child in node.items_ex(resolve=False):
        path = f"{prefix}.{key}" if prefix else str(key)
        if not isinstance(child, DictConfig):
            yield path
        yield from _paths(child, path)
