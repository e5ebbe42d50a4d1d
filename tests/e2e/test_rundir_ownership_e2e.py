"""Issue 27: nothing of the user's is overwritten. A run dir is pretrain's only when it is new, empty,
carries RUN_DIR/.pretrain-run, or is a run dir an earlier pretrain made (its frozen config.yaml);
anything else is refused in one line, exit 2, before a byte is written or moved. Before: an unrelated
directory's config.yaml, metrics.jsonl, plan.json, summary.json, loss_curve.png and checkpoints/latest
were overwritten, its checkpoints/step_00000001 moved into quarantine; and every command, refused and
invalid ones and dry runs included, wrote (or rewrote) runs/<name>/.hydra/."""
import os

import pytest

from tests.helpers.rundir_fakes import SMALL, pretrain, trained_run_dir
from pretrain.rundir import MARKER, claim


def snapshot(root):
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*"))}


def one_error_line(proc):
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def users_dir(root):
    root.mkdir()
    for name in ("config.yaml", "metrics.jsonl", "plan.json", "summary.json", "loss_curve.png"):
        (root / name).write_text(f"the user's own {name}\n")
    (root / "checkpoints" / "step_00000001").mkdir(parents=True)
    (root / "checkpoints" / "step_00000001" / "model.ckpt").write_bytes(b"the user's weights")
    (root / "checkpoints" / "latest").write_text("step_00000001\n")
    return root


def test_an_unrelated_directory_is_refused_before_anything_is_written_or_moved(tmp_path):
    mine = users_dir(tmp_path / "mine")
    before = snapshot(mine)
    for mode in ([], ["dry_run=true"]):
        line = one_error_line(pretrain(tmp_path, f"run_dir={mine}", *SMALL, *mode))
        assert f"run_dir {mine} is not empty and not a pretrain run dir (it holds checkpoints, config" in line
        assert f"`touch {mine / MARKER}`" in line
        assert snapshot(mine) == before      # no .lock, no marker, no .hydra/, nothing quarantined
    assert sorted(os.listdir(tmp_path)) == ["mine"]


@pytest.mark.slow   # 2.5-4 s: the default suite keeps under 5 minutes
def test_refused_and_invalid_commands_leave_no_hydra_dir(tmp_path):
    """Hydra writes nothing into run_dir (hydra.output_subdir=null, hydra.run.dir=.)."""
    invalid = pretrain(tmp_path, "model.hidden_size=13", "dry_run=true")
    assert invalid.returncode == 2 and not (tmp_path / "runs").exists()
    run_dir = trained_run_dir(tmp_path)        # a dry run made it: config.yaml, plan.json, the marker
    ours = {".lock", "events.jsonl"}           # the refusal's own: the lock it took, its events log

    def kept():
        return {k: v for k, v in snapshot(run_dir).items() if k not in ours}
    before = kept()
    one_error_line(pretrain(tmp_path, f"run_dir={run_dir}", *SMALL, "model.hidden_size=128"))
    assert kept() == before and not (run_dir / ".hydra").exists()


def test_a_run_dir_of_an_earlier_pretrain_is_accepted_and_marked(tmp_path):
    run_dir = trained_run_dir(tmp_path)
    (run_dir / MARKER).unlink()
    (run_dir / ".hydra").mkdir()               # what Hydra left there before
    claim(run_dir)
    assert (run_dir / MARKER).is_file()
