"""run_dir/config.yaml: the resolved config the ranks read, written by the launcher from the command line.

A run's config is its command line: the launcher rewrites config.yaml on every accepted run (and a
dry run), it never reads it. Its first line says so and carries the sha256 of the rest, which tells
a hand edit apart from what the launcher wrote: an edited file is not replaced silently but kept
beside it, as config.yaml.edited-<time>, with one line naming the keys it set apart from the command
line. (A rank started by hand, `python -m pretrain.worker RUN_DIR`, does read it.)
"""
import hashlib
import re
import time
from pathlib import Path
from typing import Any, Dict, Optional

from omegaconf import OmegaConf

_HEADER = ("# written by `python -m pretrain` from its command line, which is what the next run uses "
           "(edits here are kept aside, not read); sha256 {}\n")
_SIGNED = re.compile(r"^# written by `python -m pretrain` .*; sha256 ([0-9a-f]{64})$")


def text(cfg: Any) -> str:
    body = OmegaConf.to_yaml(cfg, resolve=True)
    return _HEADER.format(hashlib.sha256(body.encode("utf-8")).hexdigest()) + body


def hand_edited(path: Path) -> bool:
    """Whether `path` is a config.yaml the launcher wrote and someone changed since (a file without
    the signed first line, from an older version, cannot be told apart: taken as unedited)."""
    try:
        first, _, body = path.read_text(encoding="utf-8").partition("\n")
    except (OSError, UnicodeDecodeError):
        return False
    signed = _SIGNED.match(first)
    return bool(signed) and signed.group(1) != hashlib.sha256(body.encode("utf-8")).hexdigest()


def keep_hand_edit(path: Path, cfg: Any) -> Optional[str]:
    """Before `path` is replaced by text(cfg): a hand-edited one is renamed aside. Returns the line
    saying so (None when there was no edit)."""
    if not hand_edited(path):
        return None
    aside = path.with_name(f"{path.name}.edited-{time.strftime('%Y%m%d-%H%M%S')}")
    path.rename(aside)
    return (f"note: {path} was edited by hand{_differences(aside, cfg)}; a run's config comes from its "
            f"command line, so the edit is not used: kept as {aside.name} (put those keys on the "
            f"command line)")


def _differences(edited: Path, cfg: Any) -> str:
    try:
        mine = flatten(OmegaConf.to_container(OmegaConf.load(edited)))
    except Exception:  # a broken edit: no keys to name
        return ""
    now = flatten(OmegaConf.to_container(cfg, resolve=True))
    keys = sorted(k for k in set(mine) | set(now) if mine.get(k) != now.get(k))
    if not keys:
        return ""
    shown = ", ".join(f"{k}={mine.get(k, '<absent>')!r} (command line: {now.get(k, '<absent>')!r})"
                      for k in keys[:5])
    return f" ({shown}{f' and {len(keys) - 5} more' if len(keys) > 5 else ''})"


def flatten(tree: Any, prefix: str = "") -> Dict[str, Any]:
    """A nested config as {dotted key: value} (what comparisons of two configs name)."""
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: Dict[str, Any] = {}
    for key, value in tree.items():
        out.update(flatten(value, f"{prefix}{key}." if isinstance(value, dict) else f"{prefix}{key}"))
    return out
