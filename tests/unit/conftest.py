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


class _ComposeOnce:
    """hydra.compose with each distinct config composed once in the session (~0.12 s of CPU each);
    every caller gets its own deep copy (~6 ms), which it may change. Interpolations (${oc.env:...},
    the pt.* resolvers) stay unresolved in a copy, as in a fresh compose.

    The composed config is a function of the config name, the config files and the overrides that
    choose options (model=llama3_8b); an override that sets a key (parallel.micro_batch_size=2,
    +phase.lr.peak=1e-4, ~train.x) is applied to a copy of it afterwards, by the function Hydra
    applies it with once its defaults list is merged (hydra 1.3.8, ConfigLoaderImpl
    ._apply_overrides_to_config), so its errors are Hydra's too. tests/unit asks for ~200 configs,
    ~70 of them distinct in their options."""

    def __init__(self, real):
        from hydra.core.override_parser.overrides_parser import OverridesParser
        self.real, self.parser = real, OverridesParser.create()
        self.composed, self.repos = {}, {}

    def __call__(self, config_name=None, overrides=None, return_hydra_config=False, strict=None):
        from hydra._internal.config_loader_impl import ConfigLoaderImpl
        from hydra.core.global_hydra import GlobalHydra
        if not GlobalHydra.instance().is_initialized():   # Hydra's own error
            return self.real(config_name, overrides, return_hydra_config, strict)
        overrides = list(overrides or ())
        loader = GlobalHydra.instance().hydra.config_loader
        dirs = [s.path for s in loader.get_sources() if s.scheme() == "file"]
        dirs += re.findall(r"file://([^,\]\s]+)", " ".join(overrides))
        files = _config_files(dirs)
        choices, settings = overrides, []
        if not return_hydra_config:   # the returned hydra node records every override
            choices, settings = self._split(loader, config_name, overrides, files)
        key = (config_name, tuple(choices), return_hydra_config, strict, files)
        if key not in self.composed:
            self.composed[key] = self.real(config_name, choices, return_hydra_config, strict)
        cfg = copy.deepcopy(self.composed[key])
        ConfigLoaderImpl._apply_overrides_to_config(settings, cfg)
        return cfg

    def _split(self, loader, config_name, overrides, files):
        """(the overrides that choose options, the parsed overrides that set keys), as Hydra tells
        them apart (hydra._internal.defaults_list.Overrides: a dict value, or a key that is no config
        group). Overrides of hydra.* (a searchpath adds groups) and sweeps all go to Hydra's compose,
        as does a line Hydra refuses to parse, so that Hydra names it."""
        from hydra.errors import HydraException
        try:
            parsed = self.parser.parse_overrides(overrides)
            if any(o.is_hydra_override() or o.is_sweep_override() for o in parsed):
                return overrides, []
            if (config_name, files) not in self.repos:   # the repository Hydra composes config_name from
                self.repos[config_name, files] = loader._parse_overrides_and_create_caching_repo(config_name, [])[1]
        except HydraException:
            return overrides, []
        repo = self.repos[config_name, files]
        sets_a_key = [isinstance(o.value(), dict) or not repo.group_exists(o.key_or_group) for o in parsed]
        return ([line for line, s in zip(overrides, sets_a_key) if not s],
                [o for o, s in zip(parsed, sets_a_key) if s])


@pytest.fixture(scope="session", autouse=True)
def each_config_composed_once():
    import hydra
    real = hydra.compose
    hydra.compose = _ComposeOnce(real)
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
