"""One job: check the composed config, plan it, freeze it into the run directory, launch.

Typed errors become one line on stderr and exit code 2 (a traceback only with
HYDRA_FULL_ERROR=1); inside a sweep they become the job's row instead, so one invalid layout
never stops the sweep. Interrupts end in one line too, exit 128 + the signal: Ctrl-C where no
graceful stop runs or a second one during it (pretrain.resilience.signals.StopForced) says where
the run resumes from; a sweep stopped by a signal writes the summary of the jobs that finished
(pretrain.sweep.interrupt).
"""
import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import Any, Callable, Dict, NoReturn, Optional

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from pretrain import rundir
from pretrain.config import validate
from pretrain.config.errors import USER_ERRORS, PretrainConfigError
from pretrain.config.resolved import ResolvedRun
from pretrain.resilience.checkpoint import CheckpointManager
from pretrain.resilience.events import EventLog
from pretrain.resilience.resume import Continuation, start_point
from pretrain.resilience.signals import StopForced
from pretrain.sweep import interrupt
from pretrain.sweep.summary import after_interrupt, plan_row, verdict_line, write_row

# lazy imports (pretrain.train.probe): +100-180 ms and numpy; only plan.calibrate=true runs the probe.
# lazy imports (pretrain.plan, pretrain.launch): +~20 ms and +~150 ms (controller, msrun, supervise, engine
# yamls) on every `import pretrain.app`, which --help and a config error pay too; a dry run loads both anyway


def run_job(cfg: DictConfig) -> None:
    hydra_cfg = HydraConfig.get()
    in_sweep = hydra_cfg.mode == RunMode.MULTIRUN
    if in_sweep:  # each job of a sweep gets its own ${hydra.sweep.dir}/<num> directory
        cfg.run_dir = hydra_cfg.runtime.output_dir
    row: Dict[str, Any] = {"job": hydra_cfg.job.get("num", 0),
                           "overrides": " ".join(hydra_cfg.overrides.task)}
    try:
        if in_sweep:   # the job's plan and commands go to its own log; the console gets one line
            rundir.claim(Path(cfg.run_dir))
            with open(Path(cfg.run_dir) / "job.log", "w") as log, contextlib.redirect_stdout(log):
                row.update(execute(cfg))
        else:
            row.update(execute(cfg))
    except USER_ERRORS as exc:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        if not in_sweep:
            for line in str(exc).splitlines():
                print(f"error: {line}", file=sys.stderr)
            sys.exit(getattr(exc, "exit_code", 2))   # 2, or e.g. a launch's spent restart budget
        row.update(status="invalid", reason=str(exc).replace("\n", "; "))
    except BaseException as exc:   # an interrupt (Ctrl-C, a second stop signal, the sweep's), else raised
        signum = signal_behind(exc)
        if signum is None or os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        if in_sweep:
            interrupt.stop(signum)
        if isinstance(exc, SystemExit):   # data preparation's: its own line said it
            raise
        interrupted(exc, signum, cfg)
    if in_sweep:
        write_row(Path(cfg.run_dir), row)
        print(f"  #{row['job']} {verdict_line(row)}", flush=True)
        if row.get("stopped"):   # the job's training took the signal and stopped at a checkpoint
            interrupt.stop(signal.Signals[row["stopped"]])


def signal_behind(exc: BaseException) -> Optional[int]:
    """The stop signal an exception stands for, or None: Ctrl-C's KeyboardInterrupt (StopForced: a
    second stop signal), the sweep's SweepInterrupted, data preparation's SystemExit(128 + signal),
    or an error a C extension made of one of them (Ctrl-C while mindspore loads is an ImportError)."""
    codes = {128 + s: s for s in interrupt.SIGNALS}
    seen: Optional[BaseException] = exc
    for _ in range(10):   # a chain of causes is short; a cycle must not hang the exit
        if seen is None:
            return None
        if isinstance(seen, (KeyboardInterrupt, interrupt.SweepInterrupted)):
            return getattr(seen, "signum", signal.SIGINT)
        if isinstance(seen, SystemExit) and seen.code in codes:
            return codes[seen.code]
        seen = seen.__cause__ or seen.__context__
    return None


def interrupted(exc: BaseException, signum: int, cfg: DictConfig) -> NoReturn:
    """One line for a run interrupted at once, and the exit status a shell gives it (128 + signal)."""
    forced = isinstance(exc, StopForced)   # the second signal: the first one's stop was under way
    what = exc.what if forced else "stopped at once"
    print(f"interrupted ({signal.Signals(signum).name}{' again' if forced else ''}): {what}{_resumes(cfg)}",
          file=sys.stderr, flush=True)
    if "mindspore._c_expression" in sys.modules and "mindspore" not in sys.modules:
        # Ctrl-C while mindspore loaded: its C++ part registered an exit hook that fails on the rest
        # (a page of errors after this line, at times an abort); the unwinding is done, so skip them.
        sys.stdout.flush()
        os._exit(128 + signum)
    sys.exit(128 + signum)


def _resumes(cfg: DictConfig) -> str:
    """Where the same command goes on from ('' for a run dir without checkpoints, a dry run)."""
    run_dir = Path(cfg.run_dir)
    if cfg.dry_run or not (run_dir / "checkpoints").is_dir():
        return ""
    from pretrain.launch.supervise import steps_lost
    try:
        saved = steps_lost(run_dir, cfg)[1]
    except Exception:   # the line is said anyway; the step is only a courtesy
        saved = None
    if saved is None:
        return f"; no checkpoint in {run_dir / 'checkpoints'} yet: the same command starts the run again"
    return f"; the same command resumes from its newest checkpoint, step {saved} ({run_dir / 'checkpoints'})"


def main(app: Callable[[], None]) -> None:
    """Hydra's app (pretrain.__main__), with the interrupts that reach it as one line: a sweep's
    (its summary written), and Ctrl-C before a job ran (composing)."""
    try:
        app()
    except interrupt.SweepInterrupted as exc:
        sys.exit(after_interrupt(exc))
    except KeyboardInterrupt:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print("interrupted (SIGINT)", file=sys.stderr, flush=True)
        sys.exit(128 + signal.SIGINT)


def execute(cfg: DictConfig) -> Dict[str, Any]:
    """compose (done) -> check -> resolve, plan -> lock, accept -> data -> freeze -> launch. Returns the
    sweep row. Below the rules every part is handed the resolved run, not the config."""
    validate.check(cfg)
    run = ResolvedRun.of(cfg)
    if cfg.plan.calibrate:
        from pretrain.train.probe import probe
        probe(run)
    from pretrain.plan import calibration
    from pretrain.plan.planner import format_plan, plan as make_plan
    from pretrain.plan.verdict import verdict
    run = run.with_plan(make_plan(run, calibration.load(cfg)))
    plan = run.plan
    print(format_plan(plan), flush=True)
    status, refused = verdict(run)
    dry = cfg.dry_run or cfg.launcher == "print"
    # Several nodes: the launch only writes per-node scripts, which a plan-only layout may have (each
    # rank refuses to train it, in one line); a plan that does not fit gets none.
    scripts_only = cfg.hardware.num_nodes > 1 and status == "plan only"
    if refused and not (dry or scripts_only):
        raise PretrainConfigError("\n".join(refused))
    # Data files are this host's state: refused before a launch here; a dry run or node scripts
    # (the data may sit on the cluster's storage) only say so.
    missing = validate.missing_files(cfg.data)
    if missing and not dry and cfg.hardware.num_nodes == 1:
        raise PretrainConfigError("\n".join(missing))
    for line in missing:
        print(f"note: {line} on this host; a launch here would refuse it")
    row = {"status": status, "reason": "; ".join(refused), **plan_row(plan)}
    for line in refused:
        print(f"{status}: {line}")
    from pretrain import launch
    run_dir = run.run_dir
    if dry:
        where = dry_run_freeze(run, run_dir)
        row.update(launch.describe(run))
        print(f"dry run: resolved config and plan written to {where}"
              + ("" if where == run_dir else f" ({run_dir} holds a run; its config.yaml and plan.json are "
                                             f"left as they are)"))
        return row
    # Held until the launch returns: the in-process run, or msrun and every rank it starts.
    with rundir.RunDirLock(run_dir):
        row.update(launch.start(run, accept(run)))
    return row


def accept(run: ResolvedRun) -> Optional[Continuation]:
    """Refuse, before the run dir's config.yaml and plan.json are replaced, a run that could not
    continue from its checkpoints: none verifies (unusable ones are quarantined), another phase
    selection, or a config change a resume may not make. Returns where it continues from and the
    config changes it makes (resume.start_point), or None when the run dir has no checkpoints."""
    cfg, run_dir = run.cfg, run.run_dir
    if not (run_dir / "checkpoints").is_dir():
        return None
    with EventLog(run_dir / "events.jsonl") as events:
        checkpoints = CheckpointManager(run_dir / "checkpoints", events=events,
                                        keep_latest=int(cfg.train.keep_checkpoint_max),
                                        start_fresh=bool(cfg.resilience.start_fresh))
        return start_point(run, checkpoints)


def dry_run_freeze(run: ResolvedRun, run_dir: Path) -> Path:
    """A dry run never blocks on, nor overwrites, a run: it writes into run_dir only while that
    holds no checkpoints and no run holds its lock, else into run_dir/dry_run/."""
    try:
        lock = rundir.RunDirLock(run_dir).acquire()
    except rundir.RunDirBusy:
        return rundir.freeze(run, run_dir / rundir.DRY_RUN_DIR)
    try:
        return rundir.freeze(run, run_dir / rundir.DRY_RUN_DIR if rundir.holds_run(run_dir) else run_dir)
    finally:
        lock.release()
