"""Shared fixtures: composed configs (cheap, no mindspore) and a CLI runner in tmp_path."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pretrain.config.compose import composer

REPO = Path(__file__).resolve().parent.parent
CONF = REPO / "conf"


def options(group: str):
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


@pytest.fixture(scope="session")
def compose_many():
    """A composer initialised once for the whole session."""
    with composer() as run:
        yield run


@pytest.fixture
def run_python(tmp_path):
    """Run `python ARGS` (this interpreter) in tmp_path, with its own PRETRAIN_CACHE; returns the
    CompletedProcess."""
    def run(*args, env=None, timeout=600, check=False):
        full_env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
        full_env["PRETRAIN_CACHE"] = str(tmp_path / "cache")
        full_env.update(env or {})   # a caller's PRETRAIN_CACHE (a shared cache) wins
        proc = subprocess.run([sys.executable, *args], cwd=tmp_path, env=full_env,
                              capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        return proc
    return run


@pytest.fixture
def cli(run_python):
    """Run `python -m pretrain ARGS` in tmp_path; returns the CompletedProcess."""
    def run(*args, **kw):
        return run_python("-m", "pretrain", *args, **kw)
    return run


@pytest.fixture(scope="session")
def data_cache(tmp_path_factory):
    """One PRETRAIN_CACHE for the whole session: the sample corpus and its tokenizer are built once
    (30-60 s) and every CLI run that points at it only packs what its seq_length needs."""
    return tmp_path_factory.mktemp("pretrain-cache")


@pytest.fixture(scope="module")
def mindformers_scratch(tmp_path_factory):
    """A scratch CWD for code that imports mindformers (it writes ./output on import)."""
    scratch = tmp_path_factory.mktemp("mindformers")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(scratch)
        mp.setenv("LOCAL_DEFAULT_PATH", str(scratch / "output"))
        yield scratch


@pytest.fixture(scope="module")
def mindformers(mindformers_scratch):
    """MindFormers imported in the scratch CWD with the Mcore (use_legacy: False) CPU context."""
    from mindformers.core.context.build_context import build_context
    build_context({"use_legacy": False, "use_parallel": False, "context": {"mode": 0, "device_target": "CPU"},
                   "parallel": {}, "parallel_config": {}})
    return mindformers_scratch
