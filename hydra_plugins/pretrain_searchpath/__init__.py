"""Adds pretrain's sweeps/ to Hydra's search path, only for pretrain's own apps, so a sweep
definition runs as `python -m pretrain --config-name <sweep>` from a checkout or a wheel."""
from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


class PretrainSweepsSearchPath(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        from pretrain.config.compose import config_dir, sweeps_dir
        # entry.path is "/abs/conf" for a file:// entry (the scheme is kept apart)
        if any(entry.path == config_dir() for entry in search_path.get_path()):
            search_path.append(provider="pretrain-sweeps", path=f"file://{sweeps_dir()}")
