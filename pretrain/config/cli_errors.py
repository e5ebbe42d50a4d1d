"""Hydra's composition errors as one line and exit code 2.

Hydra prints a bad override or unknown key over several lines (search path, object types) and
exits 1. Before the job starts, every such failure is bad input, so we condense it to
`error: <what> (<options>)` and exit 2; HYDRA_FULL_ERROR=1 keeps Hydra's full report.
Errors raised inside a running job keep Hydra's own handling. Two failures come before Hydra
can say anything useful: an argument that is not UTF-8 (an unquoted path with a byte like 0xff:
Python hands it over surrogate-escaped, and Hydra's lexer or the UTF-8 config.yaml chokes on it),
and a run_dir Hydra cannot create or write (it puts .hydra/ and the job log there).
"""
import os
import sys
from typing import Any, Callable, List, Optional

import hydra._internal.utils as hydra_utils

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


def install(job_started: Callable[[], bool]) -> None:
    original = hydra_utils.run_and_report

    def run_and_report(func: Callable[[], Any]) -> Any:
        bad = not_utf8(sys.argv[1:])
        if bad is not None:
            print(f"error: {bad}", file=sys.stderr)
            sys.exit(2)
        try:
            return func()
        except Exception as exc:
            if job_started() or os.environ.get("HYDRA_FULL_ERROR") == "1":
                def reraise() -> Any:
                    raise exc
                return original(reraise)
            os_error = _os_error(exc)
            if os_error is not None:
                print(f"error: cannot write {os_error.filename} ({os_error.strerror}): Hydra keeps the run's "
                      f".hydra/ and job log in run_dir; choose a writable run_dir", file=sys.stderr)
                sys.exit(2)
            causes = [str(exc)]
            while exc.__cause__ is not None:   # the OmegaConf error that says which key and why
                exc = exc.__cause__
                causes.append(str(exc))
            print(f"error: {condense(chr(10).join(causes))}", file=sys.stderr)
            sys.exit(2)

    hydra_utils.run_and_report = run_and_report
