"""A non-editable install of our wheel ships conf/ and sweeps/ inside the package and still composes.

The wheel is built by this interpreter's hatchling (declared in the `test` extra, so it is there after
README's `pip install -e ".[test]"`; no network: no build isolation) and installed with `--target`
into a folder that is put first on PYTHONPATH. The runtime dependencies are this interpreter's own:
a nested `venv --system-site-packages` would see the *base* interpreter's site-packages instead of
the venv the tests run in, which on a fresh machine holds neither hatchling nor mindspore.
"""
import ast
import importlib.metadata
import importlib.util
import re
import sys

import pytest

from tests.helpers.repo import REPO


def _dist(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_test_extra_declares_what_the_tests_import():
    """README's `pip install -e ".[test]"` on a fresh machine gives the tests every module they import
    (not one that only happens to come along with another package)."""
    tomllib = pytest.importorskip("tomllib")   # Python 3.11+
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = {_dist(re.match(r"[A-Za-z0-9._-]+", r).group()) for r in
                [*project["dependencies"], *project["optional-dependencies"]["test"]]}
    imported = set()
    for path in (REPO / "tests").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                imported.add(node.module.split(".")[0])
    ours = {"pretrain", "tests", "hydra_plugins", *(p.stem for p in (REPO / "tests").rglob("*.py"))}
    third_party = sorted(imported - ours - set(sys.stdlib_module_names))
    dists = importlib.metadata.packages_distributions()
    missing = [(m, dists.get(m)) for m in third_party if not {_dist(d) for d in dists.get(m, [m])} & declared]
    assert not missing, f"imported by tests/ but declared nowhere in pyproject.toml: {missing}"


def _requirements():
    tomllib = pytest.importorskip("tomllib")   # Python 3.11+
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())
    project = declared["project"]
    extras = [r for reqs in project["optional-dependencies"].values() for r in reqs]
    return [*declared["build-system"]["requires"], *project["dependencies"], *extras]


def test_every_dependency_has_a_tested_range():
    """A fresh machine resolves the newest release a range admits (pytest 9 broke tests that way): every
    requirement has a lower and an upper bound, and what is installed here, where the tests pass, lies
    inside it."""
    from packaging.requirements import Requirement

    unbounded, outside = [], []
    for line in _requirements():
        req = Requirement(line)
        ops = {spec.operator for spec in req.specifier}
        if not ({"==", "~="} & ops or ({">=", ">"} & ops and {"<", "<="} & ops)):
            unbounded.append(line)
        try:
            installed = importlib.metadata.version(req.name)
        except importlib.metadata.PackageNotFoundError:
            continue   # an extra this environment did not install
        if not req.specifier.contains(installed, prereleases=True):
            outside.append(f"{req.name} {installed} (declared {req.specifier})")
    assert not unbounded, f"requirements without a lower and an upper bound: {unbounded}"
    assert not outside, f"installed versions outside their declared range: {outside}"
