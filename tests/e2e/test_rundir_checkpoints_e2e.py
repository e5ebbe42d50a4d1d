"""Issue 12 item 1: every checkpoint unusable -> never a silent fresh start; unusable checkpoints are
quarantined, never pruned and never counted toward keep_checkpoint_max. Fake checkpoints (no
MindSpore): verification reads only the manifest and the files' bytes."""
import pytest

from tests.helpers.rundir_fakes import SMALL, corrupt, pretrain, trained_run_dir
from pretrain.resilience.checkpoint import QUARANTINE
from pretrain.resilience.events import read_events


@pytest.mark.slow   # 2.5-4 s: the default suite keeps under 5 minutes
def test_the_cli_refuses_a_run_dir_whose_checkpoints_all_fail_and_touches_nothing_else(tmp_path):
    run_dir = trained_run_dir(tmp_path)
    for ckpt in run_dir.glob("checkpoints/step_*"):
        corrupt(ckpt)
    frozen = {name: (run_dir / name).read_bytes() for name in ("config.yaml", "plan.json")}
    proc = pretrain(tmp_path, f"run_dir={run_dir}", *SMALL)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    error, = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert error.startswith("error: no usable checkpoint")
    assert "step_00000006 (" in error and "step_00000003 (" in error
    assert "Traceback" not in proc.stderr and "trained" not in proc.stdout
    assert {name: (run_dir / name).read_bytes() for name in frozen} == frozen
    assert sorted(p.name for p in (run_dir / "checkpoints" / QUARANTINE).iterdir() if p.is_dir()) == [
        "step_00000003", "step_00000006"]
    assert {e["kind"] for e in read_events(run_dir / "events.jsonl")} == {"quarantine"}
