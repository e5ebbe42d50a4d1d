"""Fixtures of the end-to-end tests: the command line run as a subprocess (tests/helpers/cli.py), and
MindFormers imported in a scratch directory, and data tasks made to fail (data_fail)."""
import pretrain_faults   # tests/sitehooks, on sys.path from tests/conftest.py
import pytest

from tests.helpers.cli import run as cli_run


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
