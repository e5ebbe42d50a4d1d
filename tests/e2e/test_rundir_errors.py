"""Issue 12 item 7 (run dir and command line): one clear line and exit 2 instead of a traceback for
run_dir/checkpoints being a file, a read-only run dir (with and without hydra/job_logging=none) and
an unquoted non-UTF-8 path on the command line."""
import contextlib
import os
import subprocess

import pytest
from tests.helpers.rundir_fakes import SMALL, pretrain


def one_error_line(proc):
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


@contextlib.contextmanager
def read_only(path):
    """chmod 555; root ignores modes, so there the immutable attribute (ext4 and friends)."""
    if os.geteuid() != 0:
        path.chmod(0o555)
        try:
            yield
        finally:
            path.chmod(0o755)
        return
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("running as root on a file system without chattr +i: cannot make a directory read-only")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_run_dir_checkpoints_being_a_file(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "checkpoints").write_text("not a directory")
    line = one_error_line(pretrain(tmp_path, f"run_dir={run_dir}", *SMALL))
    assert f"{run_dir / 'checkpoints'} is a file, not a directory" in line


@pytest.mark.parametrize("logging", [[], ["hydra/job_logging=none"]], ids=["job_log", "no_job_log"])
def test_a_run_dir_that_cannot_be_created(tmp_path, logging):
    parent = tmp_path / "ro"
    parent.mkdir()
    with read_only(parent):
        for mode in (["dry_run=true"], []):
            line = one_error_line(pretrain(tmp_path, f"run_dir={parent / 'run'}", *SMALL, *mode, *logging))
            # our own check now (Hydra writes nothing there: hydra.output_subdir=null, issue 27)
            assert f"run_dir {parent / 'run'} is not writable" in line and "another run_dir" in line


@pytest.mark.parametrize("logging", [[], ["hydra/job_logging=none"]], ids=["job_log", "no_job_log"])
@pytest.mark.slow   # 3-5 s each; with the slow suite to keep the default one within 5 minutes (it took 396 s in CI)
def test_an_existing_read_only_run_dir(tmp_path, logging):
    run_dir = tmp_path / "run"
    assert pretrain(tmp_path, f"run_dir={run_dir}", *SMALL, "dry_run=true").returncode == 0
    with read_only(run_dir):
        for mode in (["dry_run=true"], []):
            line = one_error_line(pretrain(tmp_path, f"run_dir={run_dir}", *SMALL, *mode, *logging))
            assert str(run_dir) in line and ("not writable" in line or "cannot write" in line)
    assert not (tmp_path / "cache" / "datasets").exists()   # refused before the data build, not a minute in


def test_an_unquoted_non_utf8_path_on_the_command_line(tmp_path):
    proc = pretrain(tmp_path, b"run_dir=\xffdir", "dry_run=true")
    line = one_error_line(proc)
    assert "'run_dir=\\xffdir' is not valid UTF-8 (byte 0xff)" in line
    assert os.listdir(tmp_path) == []


def test_an_unquoted_non_ascii_path_says_to_quote_it(tmp_path):
    """Issue 27: was Hydra's raw `LexerNoViableAltException: run_dir=runs/é ^`, no hint."""
    proc = pretrain(tmp_path, "run_dir=runs/é", "dry_run=true")
    line = one_error_line(proc)
    assert "cannot parse the override 'run_dir=runs/é' at 'é'" in line and "'run_dir=\"runs/é\"'" in line
    assert os.listdir(tmp_path) == []
    quoted = pretrain(tmp_path, 'run_dir="runs/é"', "dry_run=true")
    assert quoted.returncode == 0 and (tmp_path / "runs" / "é" / "config.yaml").is_file(), quoted.stderr
