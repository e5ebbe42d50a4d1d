"""The launch: `start` takes a checked, planned run from the app (pretrain/app.py), makes its data
ready, freezes it into the run dir and hands it to what trains it: one of three.

- One device: this process, through the rank entry (pretrain.engine.train) msrun's workers use too,
  handed the data made ready here (pretrain.train.ready), so nothing is done twice.
- Several devices on this host: msrun, one `pretrain.worker` per device (`msrun_launches`).
- Several nodes: per-node scripts in RUN_DIR/launch/ (and a Slurm submit script), since each node
  must start its own msrun (`write_nodes`); their rank 0 prepares the data.
A dry run / launcher=print only says what would run (`describe`).
"""
import json
import shlex
import shutil
import time
from typing import Any, Dict, Optional

from pretrain import rundir
from pretrain.config.errors import PretrainRunError
from pretrain.config.resolved import ResolvedRun
from pretrain.engine import train
from pretrain.engine.phases import write_phases
from pretrain.launch import controller, launches, msrun, supervise
from pretrain.launch.scripts import describe_nodes, write_node_scripts
from pretrain.resilience.resume import Continuation, check_branch


# lazy imports (pretrain.train.ready, pretrain.data.manifest, pretrain.model.builder): +~500 ms (numpy, the
# data step) on every dry run, which only plans

def start(run: ResolvedRun, begin: Optional[Continuation] = None) -> Dict[str, Any]:
    """The run frozen and started: node scripts for several nodes; else the data ready, then trained
    in this process (one device) or by msrun's ranks. Returns what a sweep row records of it. `begin`:
    where it continues from, when its run dir has checkpoints (app.accept); its data must be what was
    prepared. Frozen only once the data is ready, so a command the data step refuses leaves
    config.yaml and plan.json as they were."""
    cfg, run_dir = run.cfg, run.run_dir
    if cfg.hardware.num_nodes > 1:
        rundir.freeze(run, run_dir)
        return write_nodes(run)
    check_host(run)
    check_branch(run)   # a phase run alone without its base run: say which to train, before the data
    from pretrain.data.manifest import summary_table
    from pretrain.model.builder import prepare_environment
    from pretrain.train.ready import data_ready
    prepare_environment(str(run_dir))   # GLOG_v is read as mindspore loads, and preparing loads it
    ready = data_ready(run, begin)      # once, before any rank starts: ranks only read the cache
    print(summary_table(ready.prepared, float(cfg.data.val_fraction)), flush=True)
    rundir.freeze(run, run_dir)
    write_engine_yamls(run, ready)
    if not in_process(run):
        return msrun_launches(run)
    return measured(train(run, ready=ready))


def in_process(run: ResolvedRun) -> bool:
    """One device and no msrun asked for: the launching process trains it itself."""
    return run.layout.devices == 1 and run.cfg.launcher != "msrun"


def describe(run: ResolvedRun) -> Dict[str, Any]:
    """A dry run (or launcher=print): write the engine yamls (and print the node scripts) and say
    what would run."""
    cfg, run_dir = run.cfg, run.run_dir
    write_engine_yamls(run)
    if cfg.hardware.num_nodes > 1:
        print(describe_nodes(cfg, run_dir, written=False))
        return {}
    where = "pretrain.engine.mindformers" if run.engine == "mindformers" else "pretrain.train.loop"
    here = in_process(run)
    for phase in ([None] if here else launches.engine_launches(run)):
        print("would run:", f"in this process ({where})" if here
              else shlex.join(msrun.command(cfg, run_dir.resolve(), phase=phase)))
    return {}


def write_nodes(run: ResolvedRun) -> Dict[str, Any]:
    """Several nodes: the per-node scripts each node's msrun starts from; with
    hardware.nodes_on_this_host the job controller then runs them all here (rank 0 prepares the
    data, the other ranks wait for it), else nothing trains here. (The controller's generations
    take the config from here: a shrunk job is a config of its own.)"""
    cfg, run_dir = run.cfg, run.run_dir
    write_engine_yamls(run)
    write_node_scripts(cfg, run_dir)
    if not cfg.hardware.get("nodes_on_this_host", False):
        print(describe_nodes(cfg, run_dir, written=True))
        return {}
    started = time.time()
    controller.control(cfg, run_dir, controller.LocalNodes(cfg, run_dir.resolve()))
    summary = run_dir / "summary.json"
    if not summary.is_file() or summary.stat().st_mtime < started:
        return {}
    return measured(json.loads(summary.read_text()))


def check_host(run: ResolvedRun) -> None:
    hw = run.cfg.hardware
    if hw.device == "ascend" and shutil.which("npu-smi") is None:
        raise PretrainRunError(
            f"hardware={hw.name} needs Ascend devices and this host has none (no npu-smi); "
            f"plan it here with dry_run=true and launch on the cluster")


def msrun_launches(run: ResolvedRun) -> Dict[str, Any]:
    """msrun on this host, once per engine launch still to train, all under one restart budget;
    the run's measured throughput once it trained."""
    cfg, run_dir = run.cfg, run.run_dir
    started = time.time()
    budget = supervise.RestartBudget.of(cfg.resilience)
    for phase in launches.remaining_launches(run):
        msrun.launch(cfg, run_dir, phase, budget=budget)
    summary = run_dir / "summary.json"   # rank 0 writes it when it finishes
    if not summary.is_file() or summary.stat().st_mtime < started:
        return {}
    return measured(json.loads(summary.read_text()))


def write_engine_yamls(run: ResolvedRun, ready: Optional[Any] = None) -> None:
    """run_dir/mindformers_<phase>.yaml, which MindFormers' trainer runs (train.engine=mindformers) and
    a user can run with MindFormers' own run script; written for every run, dry runs included (the
    padding id 0 until the data is ready); with the data ready (a pretrain.train.ready.Ready), also
    mindformers.yaml."""
    paths = write_phases(run, ready.pad_token_id, ready.prepared) if ready else write_phases(run)
    print(f"engine {run.engine}: MindFormers yamls {', '.join(p.name for p in paths)} in {run.run_dir}",
          flush=True)


def measured(summary: Dict[str, Any]) -> Dict[str, Any]:
    """What a sweep row records of a launch that trained, from the run summary: tokens per second over
    the steps it trained (all ranks together), and its step time after compile and peak host memory
    (set beside the plan's step_s and peak_gb); `stopped`: the signal that stopped it at a checkpoint
    (a sweep ends after that job: pretrain.app.run_job)."""
    phases = summary.get("phases", [])
    trained = [(r["tokens_per_s"] * r["wall_s"], r["wall_s"]) for r in phases if r.get("tokens_per_s")]
    wall = sum(w for _, w in trained)
    out: Dict[str, Any] = {"measured_tokens_per_s": sum(t for t, _ in trained) / wall} if wall > 0 else {}
    if summary.get("stopped"):
        out["stopped"] = summary["stopped"]
    run = summary.get("measured") or {}
    if run.get("step_s"):
        out.update(measured_step_s=run["step_s"], measured_gb=run["memory_gb"])
    return out
