"""One job: check the composed config, plan it, freeze it into the run directory, launch.

Typed errors become one line on stderr and exit code 2 (a traceback only with
HYDRA_FULL_ERROR=1); inside a sweep they become the job's row instead, so one invalid layout
never stops the sweep.
"""
import json
import os
import sys
from pathlib import Path
from typing import Any, Dict

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from pretrain.config import known_keys, validate
from pretrain.config.errors import PretrainConfigError, PretrainDataError, PretrainRunError
from pretrain.io import write_atomic

USER_ERRORS = (PretrainConfigError, PretrainDataError, PretrainRunError)


def run_job(cfg: DictConfig) -> None:
    hydra_cfg = HydraConfig.get()
    in_sweep = hydra_cfg.mode == RunMode.MULTIRUN
    if in_sweep:  # each job of a sweep gets its own ${hydra.sweep.dir}/<num> directory
        cfg.run_dir = hydra_cfg.runtime.output_dir
    row: Dict[str, Any] = {"job": hydra_cfg.job.get("num", 0),
                           "overrides": " ".join(hydra_cfg.overrides.task)}
    try:
        row.update(execute(cfg))
    except USER_ERRORS as exc:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        if not in_sweep:
            for line in str(exc).splitlines():
                print(f"error: {line}", file=sys.stderr)
            sys.exit(2)
        row.update(status="invalid", reason=str(exc).replace("\n", "; "))
    if in_sweep:
        from pretrain.sweep.summary import write_row
        write_row(Path(cfg.run_dir), row)


def execute(cfg: DictConfig) -> Dict[str, Any]:
    """compose (done) -> check -> plan -> freeze -> data -> launch. Returns the sweep row."""
    known_keys.check(cfg)   # a `+key` the schema lacks would be silently unused (or break the phases)
    validate.check(cfg)
    from pretrain.plan.planner import format_plan, plan as make_plan
    plan = make_plan(cfg)
    print(format_plan(plan), flush=True)
    run_dir = freeze(cfg, plan.to_dict())
    from pretrain.sweep.summary import plan_row
    row = {"status": "ok" if plan.fits else "does not fit", "reason": "", **plan_row(plan)}
    from pretrain.launch import launch
    row.update(launch(cfg, run_dir, dry=cfg.dry_run) or {})
    if cfg.dry_run:
        print(f"dry run: resolved config and plan written to {run_dir}")
    return row


def freeze(cfg: DictConfig, plan: Dict[str, Any]) -> Path:
    """The resolved config every rank reads (no Hydra in the ranks) and the plan beside it."""
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(run_dir / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    write_atomic(run_dir / "plan.json", json.dumps(plan, indent=2, default=str))
    return run_dir
