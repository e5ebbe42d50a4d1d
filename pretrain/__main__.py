"""`python -m pretrain [group=option ...] [key=value ...]`: compose -> check -> plan -> freeze -> launch.

Hydra composes here, in the launching process only; ranks read the frozen run_dir/config.yaml.
"""
import sys

import hydra
from omegaconf import DictConfig

from pretrain.config import cli_errors
from pretrain.config.compose import config_dir, setup

setup()
_started = False
cli_errors.install(lambda: _started)


@hydra.main(config_path=config_dir(), config_name="config", version_base="1.3")
def _app(cfg: DictConfig) -> None:
    global _started
    _started = True
    from pretrain.app import run_job
    run_job(cfg)


def main() -> None:
    if sys.argv[1:2] == ["status"]:   # `pretrain status RUN_DIR`: reads a run dir, composes nothing
        from pretrain.status.__main__ import main as status
        sys.exit(status(sys.argv[2:]))
    if sys.argv[1:2] == ["export"]:   # `pretrain export RUN_DIR --to DIR`: a Hugging Face model dir
        from pretrain.export.__main__ import main as export
        sys.exit(export(sys.argv[2:]))
    from pretrain.app import main as guarded   # interrupts as one line (a sweep's with its summary)
    guarded(_app)


if __name__ == "__main__":
    main()
