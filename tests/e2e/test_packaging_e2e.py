"""A non-editable install of our wheel ships conf/ and sweeps/ inside the package and still composes.

The wheel is built by this interpreter's hatchling (declared in the `test` extra, so it is there after
README's `pip install -e ".[test]"`; no network: no build isolation) and installed with `--target`
into a folder that is put first on PYTHONPATH. The runtime dependencies are this interpreter's own:
a nested `venv --system-site-packages` would see the *base* interpreter's site-packages instead of
the venv the tests run in, which on a fresh machine holds neither hatchling nor mindspore.
"""
import csv
import importlib.metadata
import importlib.util
import os
import subprocess
import sys

import pytest

from tests.helpers.repo import REPO


def pip(*args, cwd):
    proc = subprocess.run([sys.executable, "-m", "pip", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, f"pip {' '.join(args)}: exit {proc.returncode}\n{proc.stderr[-3000:]}"


@pytest.mark.slow   # moved out of the default suite's 5 minutes (still run by CI)
def test_non_editable_install_composes_plans_and_sweeps(tmp_path):
    if importlib.util.find_spec("hatchling") is None:
        pytest.fail('hatchling is missing: install the test extra, python -m pip install -e ".[test]"')
    dist, site = tmp_path / "dist", tmp_path / "site"
    pip("wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist), str(REPO), cwd=tmp_path)
    (wheel,) = dist.glob("pretrain-*.whl")
    pip("install", "-q", "--no-deps", "--no-compile", "--target", str(site), str(wheel), cwd=tmp_path)

    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}   # ahead of the editable checkout (a .pth entry)
    env.pop("HYDRA_FULL_ERROR", None)

    def run(*argv):
        return subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=300,
                              check=False)

    where = run(sys.executable, "-c", "import pretrain, os; print(os.path.dirname(pretrain.__file__))")
    assert where.stdout.strip() == str(site / "pretrain"), where.stdout + where.stderr  # the wheel's copy
    proc = run(sys.executable, "-m", "pretrain", "dry_run=true")
    assert proc.returncode == 0, proc.stderr
    assert "plan  tiny | single | cpu" in proc.stdout
    assert (work / "runs" / "tiny-single-cpu" / "config.yaml").is_file()
    # the sweep shipped in the wheel, through the installed console script, cut to 2 of its jobs
    sweep = run(str(site / "bin" / "pretrain"), "--config-name", "llama3_70b_64",
                f"hydra.sweep.dir={work / 'sweep'}", "parallel=dp8tp4pp2,dp8")
    assert sweep.returncode == 0, sweep.stderr[-2000:]
    rows = list(csv.DictReader((work / "sweep" / "summary.csv").read_text().splitlines()))
    assert [r["label"] for r in rows] == ["parallel=dp8tp4pp2", "parallel=dp8"], rows
    assert "hardware=ascend910b_8x8" in rows[1]["reason"]   # the shipped definition's hardware
