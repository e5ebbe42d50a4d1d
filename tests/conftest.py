"""Shared fixtures: composed configs (cheap, no mindspore) and a CLI runner in tmp_path."""
import os
import signal
import sys
import tempfile
from pathlib import Path

import pytest

from pretrain.config.compose import composer
from tests.helpers.cli import run as cli_run
from tests.helpers.repo import REPO

# MindFormers logs to $LOCAL_DEFAULT_PATH/log, else ./output/log (the checkout, for in-process imports
# here); a run sets it to its own run dir (pretrain.model.builder.prepare_environment).
os.environ.setdefault("LOCAL_DEFAULT_PATH", tempfile.mkdtemp(prefix="pretrain-tests-mindformers-"))
# A suite started in the background by a non-interactive shell (`.ci/run &`, nohup) inherits SIGINT
# ignored, and so would every process a test starts: the Ctrl-C tests would then signal processes that
# rightly ignore it (pretrain.data.interrupt leaves an ignored SIGINT alone) and wait for ever. Python's
# own handler here makes the children start with SIGINT at its default, as from a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# The test-only faults (tests/sitehooks/pretrain_faults.py) reach every process the suite starts
# through sitecustomize on PYTHONPATH; they act only where a test sets their variables.
SITEHOOKS = Path(__file__).resolve().parent / "sitehooks"
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SITEHOOKS), os.environ.get("PYTHONPATH")]))
sys.path.insert(0, str(SITEHOOKS))
import pretrain_faults  # noqa: E402  (the path above first)


@pytest.fixture(scope="session")
def compose_many():
    """A composer initialised once for the whole session."""
    with composer() as run:
        yield run


@pytest.fixture
def cli(tmp_path):
    """Run `python -m pretrain ARGS` in tmp_path; returns the CompletedProcess."""
    def run(*args, env=None, timeout=600, check=False):
        return cli_run(*args, cwd=tmp_path, env=env, timeout=timeout, check=check)
    return run


@pytest.fixture(scope="session")
def run_once(tmp_path_factory):
    """`python -m MODULE ARGS` run once per distinct ("-m", MODULE, *ARGS) in the session, each in a
    directory of its own; returns (CompletedProcess, that directory). For commands whose output tests
    only read (a sweep's summary): test_readme.py runs README's sweeps and test_cli.py checks their
    rows, in one run."""
    done = {}

    def run(*args, timeout=600):
        assert args[0] == "-m", f"run_once runs `python -m MODULE ...`, not {args}"
        if args not in done:
            cwd = tmp_path_factory.mktemp("run-once")
            done[args] = cli_run(*args[2:], cwd=cwd, module=args[1], timeout=timeout), cwd
        return done[args]
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


@pytest.fixture(scope="session", autouse=True)
def nothing_written_outside_tmp_dirs():
    """Tests write only into their tmp dirs: a run dir, a data cache or MindFormers' default
    ./output/log appearing in the checkout fails the session (it did, from in-process imports)."""
    before = {p.name for p in REPO.iterdir()}
    yield
    ignored = {".pytest_cache", ".ruff_cache", "__pycache__"}
    new = sorted({p.name for p in REPO.iterdir()} - before - ignored)
    assert not new, f"the test session wrote {new} into {REPO}: write into tmp_path instead"


@pytest.fixture
def data_fail(monkeypatch):
    """data_fail(spec) makes the data tasks matching spec fail (pretrain_faults.DATA_FAIL), in this
    process and in every worker started after it; returns the undo (also done at the test's end)."""
    undos = []

    def fail(spec):
        monkeypatch.setenv(pretrain_faults.DATA_FAIL, spec)
        unwrap = pretrain_faults.install_data_fail(spec)

        def undo():   # twice is harmless: it puts back the same original
            monkeypatch.delenv(pretrain_faults.DATA_FAIL, raising=False)
            unwrap()
        undos.append(undo)
        return undo
    yield fail
    for undo in reversed(undos):
        undo()
