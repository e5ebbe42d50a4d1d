"""`python -m pretrain [group=option ...] [key=value ...]`: compose -> check -> plan -> freeze -> launch.

Hydra composes here, in the launching process only; ranks read the frozen run_dir/config.yaml.
`pretrain status` and `pretrain export` read a run dir and compose nothing: they are dispatched before
Hydra is imported (its import is 0.4 s of a status that answers in 0.3 s).
"""
import sys

# lazy imports (pretrain, hydra, omegaconf): `pretrain status` and `pretrain export` answer before Hydra
# and the app load (+~250 ms, hydra)


def main() -> None:
    if sys.argv[1:2] == ["status"]:   # `pretrain status RUN_DIR`: a live or ended run's health
        from pretrain.status.__main__ import main as status
        sys.exit(status(sys.argv[2:]))
    if sys.argv[1:2] == ["export"]:   # `pretrain export RUN_DIR --to DIR`: a Hugging Face model dir
        from pretrain.export.__main__ import main as export
        sys.exit(export(sys.argv[2:]))
    from pretrain.app import main as guarded   # interrupts as one line (a sweep's with its summary)
    guarded(_hydra_app())


def _hydra_app():
    """The Hydra application: compose, then pretrain.app.run_job. Until the job starts, an exception is
    a config error, printed as one line (cli_errors); after, it is the job's, reported as such."""
    import hydra
    from omegaconf import DictConfig

    from pretrain.config import cli_errors
    from pretrain.config.compose import config_dir, setup

    setup()
    started = []
    cli_errors.install(lambda: bool(started))

    @hydra.main(config_path=config_dir(), config_name="config", version_base="1.3")
    def app(cfg: DictConfig) -> None:
        started.append(True)
        from pretrain.app import run_job
        run_job(cfg)
    return app


if __name__ == "__main__":
    main()
