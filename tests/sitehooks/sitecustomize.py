"""Loaded by every Python process started with this folder on PYTHONPATH (tests/conftest.py puts it
there for every process the suite starts): installs the test-only faults its variables ask for
(pretrain_faults.py). Nothing of this is in the package; with none set it imports nothing."""
import os

if any(os.environ.get(v) for v in ("PRETRAIN_FAULTS", "PRETRAIN_DATA_FAIL", "PRETRAIN_TEST_HOLD")):
    import pretrain_faults

    pretrain_faults.install_from_env()
