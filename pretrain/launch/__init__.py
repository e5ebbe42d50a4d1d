"""Hand a frozen run to the process(es) that train it; only launches.

One device: the app trains in its own process (pretrain/app.py `start`). Several on this host:
msrun, one `pretrain.worker` per device (`run_local`). Several nodes: per-node scripts in
RUN_DIR/launch/ (and a Slurm submit script), since each node must start its own msrun
(`write_nodes`). A dry run / launcher=print only says what would run (`describe`). The data is
prepared by the app before any of these start.
"""
import json
import shlex
import shutil
import time
from pathlib import Path
from typing import Any, Dict

from pretrain.config.errors import PretrainRunError
from pretrain.config.resolved import ResolvedRun
from pretrain.engine.phases import write_phases
from pretrain.launch import controller, launches, msrun, supervise
from pretrain.launch.scripts import describe_nodes, write_node_scripts


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
    controller.run(cfg, run_dir, controller.LocalNodes(cfg, run_dir.resolve()))
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


def run_local(run: ResolvedRun) -> Dict[str, Any]:
    """msrun on this host, once per engine launch still to train, all under one restart budget;
    the run's measured throughput once it trained."""
    cfg, run_dir = run.cfg, run.run_dir
    started = time.time()
    budget = supervise.RestartBudget.of(cfg.resilience)
    for phase in launches.remaining_launches(run):
        msrun.run_local(cfg, run_dir, phase, budget=budget)
    summary = run_dir / "summary.json"   # rank 0 writes it when it finishes
    if not summary.is_file() or summary.stat().st_mtime < started:
        return {}
    return measured(json.loads(summary.read_text()))


def write_engine_yamls(run: ResolvedRun, pad_token_id: int = 0) -> None:
    """run_dir/mindformers_<phase>.yaml, which MindFormers' trainer runs (train.engine=mindformers) and
    a user can run with MindFormers' own run script; written for every run, dry runs included."""
    paths = write_phases(run, pad_token_id)
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
