"""`python -m pretrain.worker RUN_DIR`: one rank of a launched run (msrun starts one per device).

Ranks never run Hydra: they read the frozen, resolved RUN_DIR/config.yaml. Each rank leaves
RUN_DIR/logs/rank_<r>.pid when it starts and RUN_DIR/logs/rank_<r>.exit when it ends (its exit
code, last error, and what it trained: pretrain.train.build.rank_evidence), so the launcher
reports the first failing or vanished rank in about a second instead of waiting for msrun's
heartbeat timeout. msrun's scheduler process runs this same command (MS_ROLE=MS_SCHED): it only
hosts the cluster rendezvous and never trains.
"""
import json
import os
import sys
from pathlib import Path

from omegaconf import OmegaConf

from pretrain.config.errors import USER_ERRORS, PretrainRunError
from pretrain.config.resolved import ResolvedRun
from pretrain.engine import train   # our loop or MindFormers' trainer (ParallelLayout.engine)
from pretrain.io import write_atomic
from pretrain.resilience.orphan import stop_with_launcher
from pretrain.resilience.signals import STATUS_ENV

# lazy imports (mindspore): by design (3-10 s); only msrun's scheduler process loads it here


def status_path(run_dir: Path, rank: int, kind: str = "exit") -> Path:
    return run_dir / "logs" / f"rank_{rank}.{kind}"


def load_frozen(run_dir: Path):
    """The frozen config; a hand edit that broke its YAML is one line, not a traceback per rank.
    (A key edited since the checkpoint is checked by the loop: resilience.resume.start_point.)"""
    try:
        return OmegaConf.load(run_dir / "config.yaml")
    except Exception as e:   # yaml's and OmegaConf's errors have no common base worth naming
        raise PretrainRunError(f"{run_dir / 'config.yaml'} does not load ({type(e).__name__}: "
                               f"{str(e).splitlines()[0] if str(e) else ''}): restore it (each checkpoint's "
                               f"state.json holds the resolved config it was made with, under \"config\")") from None


def scheduler(run_dir: Path) -> int:
    """msrun's scheduler: hosts the rendezvous. Its failure (the master port taken between the
    launcher's check and its bind) is left in RUN_DIR/logs/scheduler.exit, so the launcher says so
    within a second instead of waiting for the workers' cluster timeout."""
    try:
        import mindspore as ms
        from mindspore.communication import init
        ms.set_context(device_target="CPU")
        init()
    except BaseException as exc:
        write_atomic(run_dir / "logs" / "scheduler.exit", json.dumps(
            {"exit": 1, "port": os.environ.get("MS_SCHED_PORT"), "error": f"{type(exc).__name__}: "
             f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"}))
        raise
    return 0


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not 1 <= len(args) <= 2 or not (Path(args[0]) / "config.yaml").is_file():
        print("usage: python -m pretrain.worker RUN_DIR [PHASE]  (RUN_DIR holds the frozen config.yaml; PHASE: "
              "the one phase train.engine=mindformers trains in this launch)", file=sys.stderr)
        return 2
    run_dir = Path(args[0]).resolve()
    if os.environ.get("MS_ROLE") == "MS_SCHED":
        return scheduler(run_dir)
    rank = int(os.environ.get("RANK_ID", "0"))
    status_path(run_dir, rank).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(status_path(run_dir, rank, "pid"), str(os.getpid()))
    os.environ[STATUS_ENV] = str(status_path(run_dir, rank))   # the watchdog's exit writes it too
    status = {"rank": rank, "exit": 1, "error": "crashed (see this rank's log)"}
    try:
        cfg = load_frozen(run_dir)
        cfg.run_dir = str(run_dir)   # the frozen one may be relative to the launching directory
        stop_with_launcher(float(cfg.resilience.watchdog_timeout_s))
        summary = train(ResolvedRun.of(cfg), *args[1:])
        status.update(exit=0, error="", **summary.get("rank_evidence", {}))
    except USER_ERRORS as exc:
        status.update(exit=2, error=str(exc).splitlines()[0])
        print(f"error: [rank {rank}] {exc}", file=sys.stderr, flush=True)
    except SystemExit as exc:
        status.update(exit=exc.code if isinstance(exc.code, int) else 1, error="")
        raise
    except BaseException as exc:   # recorded, then re-raised with its traceback
        status["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        raise
    finally:
        write_atomic(status_path(run_dir, rank), json.dumps(status))
    return status["exit"]


if __name__ == "__main__":
    sys.exit(main())
