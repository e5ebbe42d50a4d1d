"""Planner: the formulas' reference values, published cross-checks, monotonic properties, every conf option.

Pure and fast (no mindspore): configs come from the real conf/ through compose(), like the CLI.
"""
import subprocess
import sys

from tests.helpers.repo import REPO


def test_planner_does_not_import_mindspore():
    code = ("import sys; import pretrain.plan.planner, pretrain.plan; "
            "assert 'mindspore' not in sys.modules and 'mindformers' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
