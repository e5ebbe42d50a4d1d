"""Fixtures of the unit tests (in this process: no subprocess, no MindSpore graph)."""
import pytest

import pretrain_faults   # tests/sitehooks, on sys.path from tests/conftest.py


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
