"""What the read stage yields: a document, or a drop with its reason (every input is one or the
other, so the manifest accounts for each). Their own module so the builtin corpus
(pretrain/data/sample.py) and the file reader (pretrain/data/sources.py) share them without
importing each other."""
from dataclasses import dataclass
from typing import Optional, Tuple, Union


@dataclass
class Doc:
    text: str
    key: Optional[bytes] = None   # what decides the held-out split; None: the text itself
    part: int = 0                 # > 0 for the 2nd, 3rd, ... piece of a document split for length


@dataclass
class Drop:
    reason: str
    count: int = 1
    where: Optional[Tuple[str, int]] = None   # (file, byte offset) of undecodable bytes, for the manifest


Item = Union[Doc, Drop]
