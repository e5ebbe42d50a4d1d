"""Issue 27: a path-valued key that cannot be a path (a 100 KB override value) is one line naming the
key, not `OSError: File name too long` with ~300 KB of output from wherever it was first stat'ed."""
from tests.helpers.rundir_fakes import pretrain

LONG = "a" * 100_000


def test_the_command_line_prints_one_short_line(tmp_path):
    proc = pretrain(tmp_path, "phase=reasoning", f"train.init_from={LONG}")
    assert proc.returncode == 2 and proc.stdout == "" and len(proc.stderr) < 400, proc.stderr[-500:]
    assert proc.stderr.startswith("error: train.init_from='aaaa") and "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []           # nothing written: no run dir, no .hydra/
