"""Hand a frozen run to the process(es) that train it.

One device: train in this process. Several on this host: msrun, one `pretrain.worker` per
device. Several nodes: per-node scripts in RUN_DIR/launch/ (and a Slurm submit script), since
each node must start its own msrun. dry_run / launcher=print only say what would run.
"""
import json
import shlex
import shutil
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from omegaconf import DictConfig

from pretrain.config.errors import PretrainRunError
from pretrain.config.validate import num_devices


def launch(cfg: DictConfig, run_dir: Path, *, dry: bool = False) -> Dict[str, Any]:
    """Run (or with dry / launcher=print, describe) the frozen run. Returns what a sweep row records
    of it: {"measured_tokens_per_s": ...} once it trained, else {}."""
    from pretrain.launch import msrun
    hw = cfg.hardware
    dry = dry or cfg.launcher == "print"
    if hw.num_nodes > 1:
        from pretrain.launch.scripts import describe_nodes, write_node_scripts
        write_engine_yamls(cfg, run_dir)
        if dry:
            print(describe_nodes(cfg, run_dir, written=False))
            return {}
        write_node_scripts(cfg, run_dir)
        print(describe_nodes(cfg, run_dir, written=True))
        return {}
    in_process = num_devices(hw) == 1 and cfg.launcher != "msrun"
    if dry:
        write_engine_yamls(cfg, run_dir)
        from pretrain.config.validate import engine
        where = "pretrain.engine.mindformers" if engine(cfg) == "mindformers" else "pretrain.train.runner"
        for phase in ([None] if in_process else engine_launches(cfg)):
            print("would run:", f"in this process ({where})" if in_process
                  else shlex.join(msrun.command(cfg, run_dir.resolve(), phase=phase)))
        return {}
    if hw.device == "ascend" and shutil.which("npu-smi") is None:
        raise PretrainRunError(
            f"hardware={hw.name} needs Ascend devices and this host has none (no npu-smi); "
            f"plan it here with dry_run=true and launch on the cluster")
    from pretrain.resilience.resume import check_branch
    check_branch(cfg)   # a phase run alone without its base run: say which to train, before the data
    from pretrain.data.manifest import summary_table
    from pretrain.data.prepare import prepare
    from pretrain.model.builder import prepare_environment
    prepare_environment(str(run_dir))   # GLOG_v is read as mindspore loads, and prepare() loads it
    prepared = prepare(cfg.data)
    print(summary_table(prepared), flush=True)   # once, before any rank starts: ranks only read the cache
    from pretrain.train.runner import pad_token_id
    write_engine_yamls(cfg, run_dir, pad_token_id(str(next(iter(prepared.values())).tokenizer_path)))
    if in_process:
        from pretrain.engine import train
        return measured(train(cfg))
    started = time.time()
    for phase in engine_launches(cfg):
        msrun.run_local(cfg, run_dir, phase)
    summary = run_dir / "summary.json"   # rank 0 writes it when it finishes
    if not summary.is_file() or summary.stat().st_mtime < started:
        return {}
    return measured(json.loads(summary.read_text()))


def engine_launches(cfg: DictConfig) -> List[Optional[str]]:
    """One msrun launch for our loop (it chains the phases itself); one per phase for MindFormers'
    engine, whose trainer runs once per process (pretrain/engine/mindformers.py)."""
    from pretrain.config.validate import engine, phases
    return [str(p.name) for p in phases(cfg)] if engine(cfg) == "mindformers" else [None]


def write_engine_yamls(cfg: DictConfig, run_dir: Path, pad_token_id: int = 0) -> None:
    """run_dir/mindformers_<phase>.yaml, which MindFormers' trainer runs (train.engine=mindformers) and
    a user can run with MindFormers' own run script; written for every run, dry runs included."""
    from pretrain.config.validate import engine
    from pretrain.engine.phases import write_phases
    paths = write_phases(cfg, run_dir, pad_token_id)
    print(f"engine {engine(cfg)}: MindFormers yamls {', '.join(p.name for p in paths)} in {run_dir}", flush=True)


def measured(summary: Dict[str, Any]) -> Dict[str, Any]:
    """Tokens per second over the steps this launch trained (all ranks together), from the run summary."""
    trained = [(r["tokens_per_s"] * r["wall_s"], r["wall_s"]) for r in summary.get("phases", [])
               if r.get("tokens_per_s")]
    wall = sum(w for _, w in trained)
    return {"measured_tokens_per_s": sum(t for t, _ in trained) / wall} if wall > 0 else {}
