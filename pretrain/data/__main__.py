"""`python -m pretrain.data [group=option ...] [data.key=value ...]`: prepare the data only.

Composes the same conf/ as `python -m pretrain` (so `data=sample model=tiny` and
`data.tokenizer.path=...` mean the same), builds or reuses every source of cfg.data, and
prints a summary table. Bad input is one `error: ...` line on stderr and exit code 2; Ctrl-C
(SIGINT) or SIGTERM is one `interrupted (...)` line and exit code 130 / 143, with the workers
stopped and no temp directory left (pretrain.data.interrupt).

Plain overrides are composed once by Hydra's compose API: `hydra.main` composes the whole tree
twice (once only to read `hydra.mode`), ~0.4 s of every data build's start-up. Hydra's flags
(--help, --cfg, -m, ...) and hydra.* overrides still go through `hydra.main`.
"""
import sys
from typing import List

import hydra
from omegaconf import DictConfig

from pretrain.config import cli_errors
from pretrain.config.compose import compose, config_dir, setup
from pretrain.config.errors import PretrainConfigError, PretrainDataError
from pretrain.data.manifest import summary_table
from pretrain.data.prepare import prepare

# Preparing data writes only into data.cache_dir: no Hydra run directory, .hydra/ or job log.
_HYDRA_QUIET = ["hydra.output_subdir=null", "hydra.run.dir=.", "hydra/job_logging=none",
                "hydra/hydra_logging=none", "hydra/help=data"]
_started = False


@hydra.main(config_path=config_dir(), config_name="config", version_base="1.3")
def _app(cfg: DictConfig) -> None:
    global _started
    _started = True
    _prepare(cfg)


def _prepare(cfg: DictConfig) -> None:
    try:
        prepared = prepare(cfg.data)
    except (PretrainDataError, PretrainConfigError) as exc:
        for line in str(exc).splitlines():
            print(f"error: {line}", file=sys.stderr)
        sys.exit(2)
    print(summary_table(prepared, float(cfg.data.val_fraction)))


def _plain(args: List[str]) -> bool:
    """Only overrides of the run's own config: nothing that needs Hydra's app machinery."""
    return not any(a.startswith("-") or a.lstrip("+~").startswith("hydra") for a in args)


def _compose_once(overrides: List[str]) -> DictConfig:
    cli_errors.refuse_not_utf8(overrides)
    try:
        return compose(overrides)
    except Exception as exc:
        if cli_errors.full_error():
            raise
        cli_errors.fail(exc)


# Hydra's flags that take a value: the word after one is not an override
_FLAGS_WITH_VALUE = {"--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd",
                     "--experimental-rerun", "--package", "-p"}


def _first_override(args: List[str]) -> int:
    """Where the overrides begin: after Hydra's flags and their values (argparse takes the overrides as
    one run of words: `--config-dir DIR` after one is 'unrecognized arguments')."""
    k = 0
    while k < len(args) and args[k].startswith("-"):
        k += 2 if args[k] in _FLAGS_WITH_VALUE else 1
    return min(k, len(args))


def main() -> None:
    setup()
    if _plain(sys.argv[1:]):
        _prepare(_compose_once(sys.argv[1:]))
        return
    cli_errors.install(lambda: _started)
    at = 1 + _first_override(sys.argv[1:])
    sys.argv[at:at] = _HYDRA_QUIET     # before the user's overrides, so their own hydra.* still win
    _app()


if __name__ == "__main__":
    main()
