"""`python -m pretrain.worker RUN_DIR`: one rank of a launched run (msrun starts one per device).

Ranks never run Hydra: they read the frozen, resolved RUN_DIR/config.yaml. Each rank leaves
RUN_DIR/logs/rank_<r>.exit with its exit code and last error, so the launcher can report the
first failing rank in seconds instead of waiting for msrun's heartbeat timeout.
"""
import json
import os
import sys
from pathlib import Path

from omegaconf import OmegaConf

from pretrain.app import USER_ERRORS
from pretrain.io import write_atomic


def status_path(run_dir: Path, rank: int) -> Path:
    return run_dir / "logs" / f"rank_{rank}.exit"


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not (Path(args[0]) / "config.yaml").is_file():
        print("usage: python -m pretrain.worker RUN_DIR  (RUN_DIR holds the frozen config.yaml)", file=sys.stderr)
        return 2
    run_dir = Path(args[0]).resolve()
    if os.environ.get("MS_ROLE") == "MS_SCHED":
        # msrun's scheduler runs this same command; it only hosts the cluster rendezvous.
        import mindspore as ms
        from mindspore.communication import init
        ms.set_context(device_target="CPU")
        init()
        return 0
    rank = int(os.environ.get("RANK_ID", "0"))
    code, error = 1, "crashed (see this rank's log)"
    try:
        from pretrain.train.runner import run
        run(OmegaConf.load(run_dir / "config.yaml"))
        code, error = 0, ""
    except USER_ERRORS as exc:
        code, error = 2, str(exc).splitlines()[0]
        print(f"error: [rank {rank}] {exc}", file=sys.stderr, flush=True)
    except SystemExit as exc:
        code, error = (exc.code if isinstance(exc.code, int) else 1), ""
        raise
    finally:
        status_path(run_dir, rank).parent.mkdir(parents=True, exist_ok=True)
        write_atomic(status_path(run_dir, rank), json.dumps({"rank": rank, "exit": code, "error": error}))
    return code


if __name__ == "__main__":
    sys.exit(main())
