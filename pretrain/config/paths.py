"""What a configured data path names on this host: the one rule that the check before a launch
(validate.missing_files) and the data step (pretrain.data.sources.resolve_files) both apply, so a
path one of them accepts the other reads the same way ('~' expanded, '**' spanning directories)."""
import glob
import os
from typing import List


def has_glob(path: str) -> bool:
    return any(c in path for c in "*?[")


def matches(raw: str) -> List[str]:
    """The paths `raw` names: a glob's matches (`**` matches any depth, none included), else the path
    itself when it exists (a dangling link too: the data step counts it as unreadable); [] for none."""
    path = os.path.expanduser(str(raw))
    if has_glob(path):
        return sorted(glob.glob(path, recursive=True))
    return [path] if os.path.lexists(path) else []
