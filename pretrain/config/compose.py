"""Where the config tree lives, and composing it outside the Hydra CLI (tests, tools)."""
from pathlib import Path
from typing import List, Optional

from omegaconf import DictConfig


def config_dir() -> str:
    """The repo's conf/ beside the package when it exists (editable install, checkout),
    else the copy shipped inside the wheel. Absolute, because a relative config_path breaks
    from a non-editable install."""
    pkg = Path(__file__).resolve().parent.parent
    repo_conf = pkg.parent / "conf"
    if (repo_conf / "config.yaml").is_file():
        return str(repo_conf)
    return str(pkg / "conf")


def setup() -> None:
    from pretrain.config import resolvers, schema
    resolvers.register()
    schema.register()


def compose(overrides: Optional[List[str]] = None, config_name: str = "config") -> DictConfig:
    """Compose like `python -m pretrain` would, without running the app (≈0.1 s)."""
    from hydra import compose as hydra_compose, initialize_config_dir
    setup()
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        return hydra_compose(config_name=config_name, overrides=list(overrides or []))
