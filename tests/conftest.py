"""What both kinds of tests need: the environment of the session and of every process it starts, a
composed config (cheap, no mindspore), the session's data cache, and the check that nothing is written
into the checkout. tests/unit/conftest.py and tests/e2e/conftest.py hold what only one kind needs;
tests/helpers/ the shared code that is not a fixture."""
import os
import signal
import sys
import tempfile
from pathlib import Path

import pytest

from pretrain.config.compose import composer
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


@pytest.fixture(scope="session")
def compose_many():
    """A composer initialised once for the whole session."""
    with composer() as run:
        yield run


@pytest.fixture(scope="session")
def data_cache(tmp_path_factory):
    """One PRETRAIN_CACHE for the whole session: the sample corpus and its tokenizer are built once
    (30-60 s) and every CLI run that points at it only packs what its seq_length needs."""
    return tmp_path_factory.mktemp("pretrain-cache")


@pytest.fixture(scope="session", autouse=True)
def nothing_written_outside_tmp_dirs():
    """Tests write only into their tmp dirs: a run dir, a data cache or MindFormers' default
    ./output/log appearing in the checkout fails the session (it did, from in-process imports)."""
    before = {p.name for p in REPO.iterdir()}
    yield
    ignored = {".pytest_cache", ".ruff_cache", "__pycache__"}
    new = sorted({p.name for p in REPO.iterdir()} - before - ignored)
    assert not new, f"the test session wrote {new} into {REPO}: write into tmp_path instead"
