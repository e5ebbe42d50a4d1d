"""The one way the tests run this project's command line: `python -m pretrain ARGS` (or `python -m
pretrain.<module> ARGS`) as a subprocess in a directory of the test's, as a user's shell would: its own
PRETRAIN_CACHE, and no HYDRA_FULL_ERROR (the one-line errors are what a user sees)."""
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional


def python_env(cache, extra: Optional[Dict[str, Optional[str]]] = None) -> Dict[str, str]:
    """The environment of a test's `python ...` subprocess: this one's, less HYDRA_FULL_ERROR, with
    PRETRAIN_CACHE=cache (a shared cache where a test passes one), then `extra` (None removes a name)."""
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env["PRETRAIN_CACHE"] = str(cache)
    for name, value in (extra or {}).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def argv(*args, module: str = "pretrain") -> List[str]:
    return [sys.executable, "-m", module, *args]


def run(*args, cwd, module: str = "pretrain", cache=None, env=None, timeout: float = 600, check: bool = False,
        **popen) -> subprocess.CompletedProcess:
    """`python -m MODULE ARGS` in cwd, to its end; the CompletedProcess, its output captured as text
    unless `popen` says otherwise. cache: PRETRAIN_CACHE (default cwd/cache); env: python_env's extra;
    check: a non-zero exit fails the test, with the end of the output."""
    popen = {"capture_output": True, "text": True, **popen}
    proc = subprocess.run(argv(*args, module=module), cwd=cwd, timeout=timeout,
                          env=python_env(Path(cwd) / "cache" if cache is None else cache, env), **popen)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def start(*args, cwd, module: str = "pretrain", cache=None, env=None, **popen) -> subprocess.Popen:
    """`python -m MODULE ARGS` started in cwd (popen: where its output goes, its own session, ...);
    the Popen. cache and env as for run."""
    return subprocess.Popen(argv(*args, module=module), cwd=cwd,
                            env=python_env(Path(cwd) / "cache" if cache is None else cache, env), **popen)
