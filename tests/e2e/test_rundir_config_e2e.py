"""Issue 12 item 3: the run directory keeps its truth. A rejected restart or a dry run never
overwrites the config.yaml and plan.json the checkpoints were made with; a config change against
the checkpoint's config is refused in one line listing the keys, unless every key is one a resume
may change (resume.RESUMABLE), which is accepted and recorded."""
import pytest
from tests.helpers.rundir_fakes import SMALL, pretrain, trained_run_dir

from pretrain.config import frozen


@pytest.mark.slow   # CLI processes around a data build
def test_a_rejected_restart_keeps_config_and_plan_and_a_dry_run_writes_beside_them(tmp_path):
    run_dir = trained_run_dir(tmp_path)
    frozen = {name: (run_dir / name).read_bytes() for name in ("config.yaml", "plan.json")}

    other = pretrain(tmp_path, f"run_dir={run_dir}", *SMALL, "model.hidden_size=128")
    assert other.returncode == 2, other.stdout[-2000:] + other.stderr[-2000:]
    error, = other.stderr.strip().splitlines()
    assert error.startswith("error: this run's config differs") and "model.hidden_size (256 -> 128)" in error
    assert {name: (run_dir / name).read_bytes() for name in frozen} == frozen

    dry = pretrain(tmp_path, f"run_dir={run_dir}", *SMALL, "model.hidden_size=128", "dry_run=true")
    assert dry.returncode == 0, dry.stderr
    assert f"written to {run_dir / 'dry_run'} ({run_dir} holds a run" in dry.stdout
    assert "hidden_size: 128" in (run_dir / "dry_run" / "config.yaml").read_text()
    assert {name: (run_dir / name).read_bytes() for name in frozen} == frozen


def test_a_dry_run_on_a_fresh_run_dir_still_writes_into_it(tmp_path):
    proc = pretrain(tmp_path, f"run_dir={tmp_path / 'run'}", *SMALL, "dry_run=true")
    assert proc.returncode == 0 and f"written to {tmp_path / 'run'}\n" in proc.stdout
    assert (tmp_path / "run" / "config.yaml").is_file() and not (tmp_path / "run" / "dry_run").exists()


def test_the_worker_refuses_a_config_yaml_edited_since_the_checkpoint(tmp_path):
    """msrun's ranks read run_dir/config.yaml: a hand edit there meets the same rule."""
    run_dir = trained_run_dir(tmp_path)
    text = (run_dir / "config.yaml").read_text()
    (run_dir / "config.yaml").write_text(text.replace("num_layers: 4", "num_layers: 6")
                                         .replace("seed: 1234", "seed: 7"))
    proc = pretrain(tmp_path, str(run_dir), module="pretrain.worker")
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    error = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(error) == 1
    assert "model.num_layers (4 -> 6)" in error[0] and "train.seed (1234 -> 7)" in error[0]
    assert "Traceback" not in proc.stderr


def test_the_worker_says_which_file_when_config_yaml_no_longer_parses(tmp_path):
    run_dir = trained_run_dir(tmp_path)
    (run_dir / "config.yaml").write_text("model: [unclosed\n")
    proc = pretrain(tmp_path, str(run_dir), module="pretrain.worker")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{run_dir / 'config.yaml'} does not load" in proc.stderr


@pytest.mark.slow   # 2.5-4 s: the default suite keeps under 5 minutes
def test_a_hand_edited_config_yaml_is_kept_aside_and_said_not_silently_replaced(tmp_path):
    """Issue 27: edits to run_dir/config.yaml were overwritten by the next command without a word."""
    run = tmp_path / "run"
    first = pretrain(tmp_path, f"run_dir={run}", *SMALL, "dry_run=true")
    assert first.returncode == 0, first.stderr
    text = (run / "config.yaml").read_text()
    assert text.startswith("# written by `python -m pretrain` from its command line")
    (run / "config.yaml").write_text(text.replace("num_layers: 4", "num_layers: 6"))
    again = pretrain(tmp_path, f"run_dir={run}", *SMALL, "dry_run=true")
    assert again.returncode == 0, again.stderr
    (kept,) = run.glob("config.yaml.edited-*")
    assert "num_layers: 6" in kept.read_text() and "num_layers: 4" in (run / "config.yaml").read_text()
    (note,) = [ln for ln in again.stdout.splitlines() if ln.startswith("note: ") and "edited" in ln]
    assert "model.num_layers=6 (command line: 4)" in note and kept.name in note
    assert not frozen.hand_edited(run / "config.yaml")       # the rewritten one: the next run says nothing
