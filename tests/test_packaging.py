"""A non-editable `pip install .` ships conf/ and sweeps/ inside the package and still composes."""
import subprocess
import sys

from tests.conftest import REPO


def test_non_editable_install_composes_plans_and_sweeps(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    py = venv / "bin" / "python"
    # --no-deps: the runtime deps come from the system site; this checks our own wheel's contents
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", str(REPO)],
                   check=True, capture_output=True, timeout=300)
    work = tmp_path / "elsewhere"
    work.mkdir()
    where = subprocess.run([str(py), "-c", "import pretrain, os; print(os.path.dirname(pretrain.__file__))"],
                           cwd=work, capture_output=True, text=True, check=True).stdout.strip()
    assert where.startswith(str(venv)), where     # the installed copy, not the checkout
    proc = subprocess.run([str(py), "-m", "pretrain", "dry_run=true"], cwd=work, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "plan  tiny | single | cpu" in proc.stdout
    assert (work / "runs" / "tiny-single-cpu" / "config.yaml").is_file()
    sweep = subprocess.run([str(venv / "bin" / "pretrain"), "--config-name", "llama3_70b_64",
                            f"hydra.sweep.dir={work / 'sweep'}"], cwd=work, capture_output=True, text=True)
    assert sweep.returncode == 0, sweep.stderr[-2000:]
    assert (work / "sweep" / "summary.csv").is_file()
