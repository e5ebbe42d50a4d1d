"""Imports only point down the layer order (pretrain/tools/imports.py), and a rank reads its frozen
config without Hydra."""

from pathlib import Path
from typing import Dict

from pretrain.tools import imports


def test_no_module_imports_a_layer_above_its_own():
    assert list(imports.upward()) == []


def write_package(root: Path, files: Dict[str, str]) -> Path:
    """root/pretrain/ with these {relative path: text} modules: a package for the import checks."""
    package = root / "pretrain"
    for name, text in files.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    return package


def test_every_subpackage_has_a_layer():
    layers = {imports.layer_of(m) for m, _ in imports.modules()}
    assert layers - set(imports.LAYERS) == set()


def test_a_lazy_upward_import_is_caught(tmp_path):
    """An import inside a function counts like one at the top; `from pkg import module` is that module."""
    package = write_package(tmp_path, {
        "__init__.py": "",
        "config/__init__.py": "",
        "config/rules.py": "def check():\n    from pretrain.train import loop\n    return loop\n",
        "train/__init__.py": "",
        "train/loop.py": "from pretrain.config.rules import check\n",
    })
    found = list(imports.upward(package))
    assert len(found) == 1 and "pretrain.config.rules -> pretrain.train.loop" in found[0]
    assert imports.graph(package)["train"]["config"] == {"pretrain.train.loop -> pretrain.config.rules"}
    assert imports.circles(package) == [["pretrain.config.rules", "pretrain.train.loop"]]


def test_modules_import_each_other_in_no_circle():
    assert imports.circles() == []


def test_the_builtin_sources_the_rules_accept_are_the_ones_the_generator_has():
    from pretrain.config.choices import BUILTIN_SOURCES
    from pretrain.data import sample
    assert BUILTIN_SOURCES == sample.BUILTINS
    for name in BUILTIN_SOURCES:
        assert callable(sample.documents.__globals__[f"_{name}"])


def _targets(edges) -> set:
    return {line.split(" -> ")[1] for where in edges.values() for line in where}


def test_the_app_hands_the_run_to_the_launch_which_reaches_a_rank_through_one_entry():
    """The app checks, plans, locks and freezes; the launch makes the data ready (pretrain.train.ready)
    and trains in this process only through the rank entry msrun's workers use (pretrain.engine.train)."""
    graph = imports.graph()
    app = _targets(graph["app"])
    assert not {t for t in app if t.startswith(("pretrain.data", "pretrain.engine", "pretrain.train."))} - {
        "pretrain.train.probe"}   # plan.calibrate=true probes the hardware before planning
    launch = _targets(graph["launch"])
    assert {"pretrain.engine", "pretrain.train.ready"} <= launch
    assert not launch & {"pretrain.train.loop", "pretrain.data.prepare"}
    assert "pretrain.engine" in _targets(graph["worker"])


def test_an_import_inside_a_function_counts_unless_lazy_by_design_or_marked(tmp_path):
    """The allowance counts in-function imports; mindspore's and those a module's `# lazy imports (...)`
    comment names (a measured start-up cost) are excused, the rest are listed."""
    package = write_package(tmp_path, {
        "__init__.py": "",
        "data/__init__.py": "",
        "data/io.py": "",
        "data/heavy.py": "",
        "data/stages.py": ("# lazy imports (pretrain.data.heavy, numba): +0.4 s per worker\n"
                           "def a():\n    from pretrain.data import io\n"
                           "def b():\n    import mindspore\n    from pretrain.data import heavy\n"
                           "def c():\n    import numba\n    import json\n"),
    })
    assert imports.late_imports(package) == ["pretrain/data/stages.py:3 pretrain.data",
                                             "pretrain/data/stages.py:9 json"]


def test_the_package_keeps_within_its_allowance_of_in_function_imports():
    assert len(imports.late_imports()) <= imports.ALLOWANCE
