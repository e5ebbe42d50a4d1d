"""Hydra's composition errors as one line and exit code 2.

Hydra prints a bad override or unknown key over several lines (search path, object types) and
exits 1. Before the job starts, every such failure is bad input, so we condense it to
`error: <what> (<options>)` and exit 2; HYDRA_FULL_ERROR=1 keeps Hydra's full report.
Errors raised inside a running job keep Hydra's own handling.
"""
import os
import sys
from typing import Any, Callable

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


def install(job_started: Callable[[], bool]) -> None:
    original = hydra_utils.run_and_report

    def run_and_report(func: Callable[[], Any]) -> Any:
        try:
            return func()
        except Exception as exc:
            if job_started() or os.environ.get("HYDRA_FULL_ERROR") == "1":
                def reraise() -> Any:
                    raise exc
                return original(reraise)
            causes = [str(exc)]
            while exc.__cause__ is not None:   # the OmegaConf error that says which key and why
                exc = exc.__cause__
                causes.append(str(exc))
            print(f"error: {condense(chr(10).join(causes))}", file=sys.stderr)
            sys.exit(2)

    hydra_utils.run_and_report = run_and_report
