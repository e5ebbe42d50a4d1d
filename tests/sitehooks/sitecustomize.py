"""Loaded by every Python process started with this folder on PYTHONPATH (a preparation and its spawned
pool workers alike): with PRETRAIN_TEST_HOLD=<stage>/<task glob>, a matching data task, inside its temp
directory, drops a file in PRETRAIN_TEST_HOLD_DIR and then waits until a signal ends it. An interrupt
test so signals work that cannot have finished, whatever the machine's load: no race, no fixed sleep.
Nothing of this is in the package: it wraps pretrain.data.stages._commit from outside."""
import fnmatch
import os
import time
from pathlib import Path

PATTERN = os.environ.get("PRETRAIN_TEST_HOLD")

if PATTERN:
    from pretrain.data import stages

    _commit = stages._commit

    def _held_commit(out, stage, work):
        name = f"{stage}/{Path(out).name}"
        if not fnmatch.fnmatch(name, PATTERN):
            return _commit(out, stage, work)

        def hold(tmp):
            marker = Path(os.environ["PRETRAIN_TEST_HOLD_DIR"]) / f"{os.getpid()}-{name.replace('/', '-')}"
            marker.touch()
            while True:                # until a signal ends this process (or raises in it)
                time.sleep(3600)
        return _commit(out, stage, hold)

    stages._commit = _held_commit
