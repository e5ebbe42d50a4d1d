"""Interrupts of `python -m pretrain` end in one line and exit 128 + the signal (issue 40): which
exceptions stand for a stop signal, and Ctrl-C while mindspore loads (its C++ exit hook then fails
on the half-loaded module: a page of errors after the line, at times an abort)."""
import subprocess
import sys
import textwrap


CTRL_C_WHILE_MINDSPORE_LOADS = textwrap.dedent("""
    import signal, sys
    from omegaconf import OmegaConf

    class CtrlC:   # Ctrl-C arrives as mindspore.nn starts loading, after its C++ part did
        def find_spec(self, name, path=None, target=None):
            if name == "mindspore.nn":
                raise KeyboardInterrupt
    sys.meta_path.insert(0, CtrlC())
    from pretrain.app import interrupted
    try:
        import mindspore
    except KeyboardInterrupt as exc:
        assert "mindspore._c_expression" in sys.modules
        interrupted(exc, signal.SIGINT, OmegaConf.create({"run_dir": sys.argv[1], "dry_run": False}))
""")


def test_ctrl_c_while_mindspore_loads_is_one_line_and_130(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    proc = subprocess.run([sys.executable, "-c", CTRL_C_WHILE_MINDSPORE_LOADS, str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 130, proc.stderr[-3000:]
    assert proc.stderr.splitlines() == [
        f"interrupted (SIGINT): stopped at once; no checkpoint in {tmp_path / 'checkpoints'} yet: the same "
        f"command starts the run again"]
