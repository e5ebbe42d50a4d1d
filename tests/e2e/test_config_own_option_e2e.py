"""A user's own option without its `defaults:` line (issue 40): README invites `--config-dir DIR` with
`DIR/model/mine.yaml`; one holding only `name` and `hidden_size` leaves the model schema's other
mandatory keys unset. One line names all of them and the `defaults:` line that fixes it, exit 2,
nothing written; in a sweep it is that job's row. And the line's fix composes a valid config."""
import csv

import pytest

from tests.helpers.own_option import FIX, assert_unset_line, own_option_dir


@pytest.fixture
def own(tmp_path):
    return own_option_dir(tmp_path)


@pytest.mark.parametrize("extra", [[], ["dry_run=true"]], ids=["launch", "dry_run"])
def test_own_option_without_defaults_is_one_line_and_writes_nothing(cli, tmp_path, own, extra):
    proc = cli("--config-dir", str(own), "model=mine", "run_dir=run", *extra)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert_unset_line(lines[0])
    assert f"start {own / 'model' / 'mine.yaml'} with {FIX}" in lines[0]   # the file Hydra read
    assert sorted(p.name for p in tmp_path.iterdir()) == ["myconf"]   # no run dir, no cache


@pytest.mark.slow   # a sweep: ~5 s
def test_own_option_without_defaults_is_its_sweep_row(cli, tmp_path, own):
    proc = cli("-m", "--config-dir", str(own), "model=mine", "dry_run=true", "hydra.sweep.dir=sweep")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "#0 invalid: model=mine leaves 10 keys" in proc.stdout, proc.stdout
    (row,) = csv.DictReader(open(tmp_path / "sweep" / "summary.csv"))
    assert row["status"] == "invalid", row
    assert_unset_line(row["reason"])
