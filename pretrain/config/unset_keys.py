"""Mandatory keys (`???` in the schema) that a composed config leaves unset, named with the fix.

A user's own option (`--config-dir DIR` with `DIR/model/mine.yaml` holding a few keys and no
`defaults:` line) gets every other field of its group's schema as `???`, and OmegaConf raises
MissingMandatoryValue at the first read, deep in the rules, naming one key. `unset(cfg)` names all of
them, one line per group, with the `defaults:` line that takes them from an existing option (the
rulebook's first rule, validate.problems). Nothing here resolves an interpolation: a key that points
at an unset one (train.lr_peak: ${model.lr_peak}) is not named, the unset key is.
"""
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

from omegaconf import DictConfig, ListConfig, OmegaConf

from pretrain.config.compose import config_dir

# lazy imports (hydra): +~95 ms; a rank reads its frozen config without Hydra


def unset(cfg: DictConfig, prefix: str = "") -> List[str]:
    """One line per group (model, data, ...) or top-level key with `???` values under `cfg`, whose
    dotted keys start with `prefix` ("data." when `cfg` is the data node alone)."""
    by_group: Dict[str, List[str]] = {}
    for key in _missing(cfg, prefix):
        by_group.setdefault(key.split(".", 1)[0], []).append(key)
    return [_line(group, keys, cfg if prefix else cfg.get(group)) for group, keys in by_group.items()]


def _missing(node: Any, prefix: str) -> Iterator[str]:
    """Dotted keys of `???` values, in the schema's order, without reading any value that is one."""
    for key in range(len(node)) if isinstance(node, ListConfig) else list(node.keys()):
        where = f"{prefix}{key}"
        if OmegaConf.is_missing(node, key):
            yield where
        elif not OmegaConf.is_interpolation(node, key):
            child = node[key]
            if isinstance(child, (DictConfig, ListConfig)):
                yield from _missing(child, where + ".")


def _line(group: str, keys: List[str], node: Any) -> str:
    options = builtin_options(group)
    if keys == [group] and options:
        return f"{group}: no option chosen; add {group}=<option> (available: {', '.join(options)})"
    choice = _choice(group, node)
    # train.*, run_dir (no option file to extend), or a package option (only an override like
    # model.num_layers=??? unsets its keys): set them
    if not options or choice in options:
        which = "it" if len(keys) == 1 else "each"
        return f"{', '.join(keys)}: unset (???); set {which} (e.g. {keys[0]}=...)"
    base = next(o for o in [default_option(group), *options] if o and o != choice)
    where = _option_file(group, choice) or f"its file ({group}/{choice}.yaml)"
    many = len(keys) > 1
    return (f"{group}={choice} leaves {len(keys)} key{'s' if many else ''} of the {group} schema unset: "
            f"{', '.join(keys)}; start {where} with `defaults: [{base}, _self_]` to take "
            f"{'them' if many else 'it'} from an existing option (available: {', '.join(options)}), or set "
            f"{'each one' if many else 'it'}")


def builtin_options(group: str) -> List[str]:
    """The package's options of a config group (conf/<group>/*.yaml); none for a key that is no group."""
    return sorted(p.stem for p in (Path(config_dir()) / group).glob("*.yaml"))


def default_option(group: str) -> Optional[str]:
    """The option conf/config.yaml picks for `group` (model: tiny), the one a user most likely extends."""
    for entry in OmegaConf.load(Path(config_dir()) / "config.yaml").get("defaults", []):
        if isinstance(entry, DictConfig) and group in entry:
            return str(entry[group])
    return None


def _choice(group: str, node: Any) -> str:
    """The option picked for `group` (model=mine -> mine): Hydra's record of the command line, else
    the option's own `name:` (compose() in tests and tools has no Hydra app to ask)."""
    from hydra.core.hydra_config import HydraConfig
    if HydraConfig.initialized():
        choice = HydraConfig.get().runtime.choices.get(group)
        if choice:
            return str(choice)
    named = isinstance(node, DictConfig) and "name" in node and not OmegaConf.is_missing(node, "name")
    return str(node.name) if named else "<option>"


def _option_file(group: str, choice: str) -> Optional[str]:
    """The file Hydra read for `group=choice`, found on its search path (a --config-dir first)."""
    from hydra.core.hydra_config import HydraConfig
    if not HydraConfig.initialized():
        return None
    for source in HydraConfig.get().runtime.config_sources:
        path = Path(source.path) / group / f"{choice}.yaml"
        if source.schema == "file" and path.is_file():
            return str(path)
    return None
