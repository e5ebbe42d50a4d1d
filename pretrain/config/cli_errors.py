"""Hydra's composition errors as one line and exit code 2.

Hydra prints a bad override or unknown key over several lines (search path, object types) and
exits 1. Before the job starts, every such failure is bad input, so we condense it to
`error: <what> (<options>)` and exit 2; HYDRA_FULL_ERROR=1 keeps Hydra's full report.
Errors raised inside a running job keep Hydra's own handling. Two failures come before Hydra
can say anything useful: an argument that is not UTF-8 (an unquoted path with a byte like 0xff:
Python hands it over surrogate-escaped, and Hydra's lexer or the UTF-8 config.yaml chokes on it),
and an output dir Hydra cannot create or write (a sweep's dir with its job logs; a single run's
Hydra output dir is `.` with no .hydra/, conf/config.yaml, so run_dir is pretrain's own check).

An override Hydra's grammar cannot read (an unquoted non-ASCII path: its raw
LexerNoViableAltException) is one line with the quoting that makes it a string.

An override of a key the schema lacks names the key that was probably meant (train.lr ->
train.lr_peak) instead of Hydra's advice to add it with `+`, which the job would refuse
(pretrain/config/known_keys.py); `phase.lr.peak=...` under phase=all names the per-phase keys.
"""
import dataclasses
import os
import re
import sys
from typing import Any, Callable, List, NoReturn, Optional

import hydra._internal.utils as hydra_utils
from hydra.errors import OverrideParseException

from pretrain.config import known_keys

_NOISE = ("full_key:", "reference_type=", "object_type=", "provider=", "Config search path",
          "Set the environment variable", "See https://hydra.cc")


def condense(message: str) -> str:
    lines = [ln.rstrip() for ln in message.splitlines()]
    options = [ln.strip() for ln in lines if ln.startswith("\t") and "provider=" not in ln]
    keep = [ln.strip() for ln in lines if ln.strip() and not ln.startswith("\t")
            and not ln.strip().startswith(_NOISE) and not ln.startswith("Available options")]
    text = " ".join(keep).replace("In 'config': ", "")
    real = [o for o in options if not o.startswith("base_")]   # schema nodes are not choices
    return f"{text} (available: {', '.join(real)})" if real else text


def not_utf8(args: List[str]) -> Optional[str]:
    """The first argument that is not valid UTF-8 (surrogate-escaped by Python), as one line."""
    for arg in args:
        raw = arg.encode("utf-8", "surrogateescape")
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as e:
            shown = raw.decode("utf-8", "backslashreplace")
            return (f"command-line argument '{shown}' is not valid UTF-8 (byte 0x{raw[e.start]:02x}): the "
                    f"run's config is UTF-8 YAML; use a UTF-8 name (e.g. rename the directory)")
    return None


def _os_error(exc: BaseException) -> Optional[OSError]:
    """The OSError naming a file behind `exc` (logging.config wraps the job log's in a ValueError)."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, OSError) and exc.filename is not None:
            return exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def unknown_key(causes: List[BaseException]) -> Optional[str]:
    """One line for an override of a key that does not exist, from OmegaConf's error (it carries
    the node the key was looked up in); None for any other error."""
    said = next((m for c in causes for m in [re.match(r"Could not override '([^']+)'.*use \+\S+?=(\S*)",
                                                      str(c), re.S)] if m), None)
    override, value = (said.group(1), said.group(2)) if said else (None, None)
    for exc in causes:
        parent, full_key = getattr(exc, "parent_node", None), getattr(exc, "full_key", None)
        if override is None or parent is None or not full_key:
            continue
        if full_key.startswith("phase.") and full_key.count(".") == 1 and known_keys.is_curriculum(parent):
            return known_keys.per_phase(override, list(parent), value)
        kind = getattr(exc, "object_type", None)
        if kind is not None and dataclasses.is_dataclass(kind):
            where = full_key.rpartition(".")[0]
            hint = known_keys.suggest(full_key, [f"{where}.{k}" if where else k for k in parent])
            return (f"Could not override '{override}': Key '{getattr(exc, 'key', full_key)}' not in "
                    f"'{kind.__name__}'" + (f"; did you mean {hint}?" if hint else ""))
    return None


def unparsable(causes: List[BaseException]) -> Optional[str]:
    """One line for an override Hydra's grammar cannot read, e.g. an unquoted non-ASCII path (its
    lexer stops at the first such character), with the quoting that makes it a plain string."""
    exc = next((c for c in causes if isinstance(c, OverrideParseException)), None)
    if exc is None:
        return None
    override = str(exc.override)
    key, eq, value = override.partition("=")
    if not eq or not (str(exc).startswith("LexerNoViableAltException") or not value.isascii()):
        return None            # e.g. '+foo' without a value: Hydra's own words say it
    where = ""
    col = re.search(r"\n( *)\^", str(exc))
    if col is not None:
        at = len(col.group(1)) - len("LexerNoViableAltException: ")
        if 0 <= at < len(override):
            where = f" at {override[at]!r} (character {at + 1})"
    if '"' in value:
        fix = "quote the value"
    elif value.startswith("[") and value.endswith("]"):    # a list: each item quoted, still a list
        fix = f"'{key}=[" + ",".join(f'"{v.strip()}"' for v in value[1:-1].split(",")) + "]'"
    else:
        fix = f"'{key}=\"{value}\"'"
    return (f"cannot parse the override {override!r}{where}: unquoted, Hydra's override grammar takes only "
            f"ASCII letters, digits and a few symbols; quote the value, e.g. {fix} (quotes inside the "
            f"shell's quotes)")


def fail(exc: Exception) -> NoReturn:
    """`exc`, raised while composing, as one `error: ...` line on stderr and exit code 2."""
    os_error = _os_error(exc)
    if os_error is not None:
        print(f"error: cannot write {os_error.filename} ({os_error.strerror}): Hydra keeps the run's "
              f".hydra/ and job log in run_dir; choose a writable run_dir", file=sys.stderr)
        sys.exit(2)
    causes = [exc]
    while causes[-1].__cause__ is not None:   # the OmegaConf error that says which key and why
        causes.append(causes[-1].__cause__)
    line = unknown_key(causes) or unparsable(causes) or condense("\n".join(str(c) for c in causes))
    print(f"error: {line}", file=sys.stderr)
    sys.exit(2)


def refuse_not_utf8(args: List[str]) -> None:
    bad = not_utf8(args)
    if bad is not None:
        print(f"error: {bad}", file=sys.stderr)
        sys.exit(2)


def full_error() -> bool:
    """HYDRA_FULL_ERROR=1: the user asked for Hydra's full report and traceback."""
    return os.environ.get("HYDRA_FULL_ERROR") == "1"


def install(job_started: Callable[[], bool]) -> None:
    original = hydra_utils.run_and_report

    def run_and_report(func: Callable[[], Any]) -> Any:
        refuse_not_utf8(sys.argv[1:])
        try:
            return func()
        except Exception as exc:
            if job_started() or full_error():
                def reraise() -> Any:
                    raise exc
                return original(reraise)
            fail(exc)

    hydra_utils.run_and_report = run_and_report
