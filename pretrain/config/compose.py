"""Where the config tree lives, and composing it outside the Hydra CLI (tests, tools)."""
from pathlib import Path
from contextlib import contextmanager
from typing import Callable, Iterator, Sequence

from omegaconf import DictConfig

from pretrain.config import resolvers, schema

# lazy imports (hydra): +~95 ms; a rank reads its frozen config without Hydra


def _root() -> Path:
    """The repo checkout (editable install) when conf/ sits beside the package, else the
    installed package, into which the wheel copies conf/ and sweeps/."""
    pkg = Path(__file__).resolve().parent.parent
    return pkg.parent if (pkg.parent / "conf" / "config.yaml").is_file() else pkg


def config_dir() -> str:
    """Absolute, because a relative config_path breaks from a non-editable install."""
    return str(_root() / "conf")


def sweeps_dir() -> str:
    return str(_root() / "sweeps")


def launchers_dir() -> str:
    return str(_root() / "launchers")


def setup() -> None:
    resolvers.register()
    schema.register()


@contextmanager
def composer() -> Iterator[Callable[..., DictConfig]]:
    """Hydra initialised once; the yielded function composes many configs cheaply."""
    from hydra import compose as hydra_compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    setup()

    def run(overrides: Sequence[str] = (), config_name: str = "config") -> DictConfig:
        return hydra_compose(config_name=config_name, overrides=list(overrides))

    if GlobalHydra.instance().is_initialized():   # nested: an outer composer already set it up
        yield run
        return
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        yield run


def compose(overrides: Sequence[str] = (), config_name: str = "config") -> DictConfig:
    """Compose like `python -m pretrain` would, without running the app (≈0.1 s)."""
    with composer() as run:
        return run(overrides, config_name)
