"""Fixtures of the unit tests (in this process: no subprocess, no MindSpore graph)."""
import copy
import functools
import re
from pathlib import Path

import pytest


def _config_files(dirs):
    """(path, size, mtime) of every file under dirs: a test that writes or edits a config file there
    (its own --config-dir, hydra.searchpath) composes it afresh."""
    return tuple((str(f), st.st_size, st.st_mtime_ns) for d in dirs for f in sorted(Path(d).rglob("*"))
                 if f.is_file() and (st := f.stat()))


@pytest.fixture(scope="session", autouse=True)
def each_config_composed_once():
    """Hydra's compose (~0.2 s of CPU) runs once per distinct config name, overrides and config files in
    the session; every caller gets its own deep copy (~6 ms), which it may change. The unit tests
    compose hundreds of configs, many of them several times. Interpolations (${oc.env:...}, the pt.*
    resolvers) stay unresolved in a copy, as in a fresh compose."""
    import hydra
    from hydra.core.global_hydra import GlobalHydra
    real, done = hydra.compose, {}

    def compose(config_name=None, overrides=None, return_hydra_config=False, strict=None):
        if not GlobalHydra.instance().is_initialized():   # Hydra's own error
            return real(config_name, overrides, return_hydra_config, strict)
        overrides = list(overrides or ())
        dirs = [s.path for s in GlobalHydra.instance().hydra.config_loader.get_sources() if s.scheme() == "file"]
        dirs += re.findall(r"file://([^,\]\s]+)", " ".join(overrides))
        key = (config_name, tuple(overrides), return_hydra_config, strict, _config_files(dirs))
        if key not in done:
            done[key] = real(config_name, overrides, return_hydra_config, strict)
        return copy.deepcopy(done[key])

    hydra.compose = compose
    yield
    hydra.compose = real


@pytest.fixture(scope="session", autouse=True)
def each_interpolation_parsed_once():
    """OmegaConf parses a `${...}` string with its ANTLR grammar every time the value is read or merged
    (a sixth of the config tests' CPU time: the configs share a few hundred such strings); the parse is a
    function of the string alone, and its tree is only read, so one per string serves the session."""
    import omegaconf._utils
    import omegaconf.base
    import omegaconf.resolvers.oc
    modules = (omegaconf.base, omegaconf._utils, omegaconf.resolvers.oc)
    real = omegaconf.base.parse
    cached = functools.lru_cache(maxsize=None)(real)
    for module in modules:
        module.parse = cached
    yield
    for module in modules:
        module.parse = real
