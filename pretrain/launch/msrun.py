"""msrun: MindSpore's own launcher, one process per device, for this host or one node of many."""
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

from omegaconf import DictConfig

from pretrain.config.errors import PretrainRunError
from pretrain.config.validate import num_devices

CLUSTER_TIME_OUT_S = 600
LAST_LINES = 12


def command(cfg: DictConfig, run_dir: Path, node_rank: int = 0) -> List[str]:
    """The msrun command line for one node (ranks read run_dir/config.yaml)."""
    hw = cfg.hardware
    return ["msrun", f"--worker_num={num_devices(hw)}", f"--local_worker_num={hw.devices_per_node}",
            f"--master_addr={hw.master_addr}", f"--master_port={hw.master_port}", f"--node_rank={node_rank}",
            f"--log_dir={run_dir / 'logs'}", "--join=True", f"--cluster_time_out={CLUSTER_TIME_OUT_S}",
            "--tail_worker_log=0",   # rank 0's progress on the console; every rank's log in log_dir
            "python", "-m", "pretrain.worker", str(run_dir)]


def run_local(cfg: DictConfig, run_dir: Path) -> Dict[str, float]:
    """Run every rank on this host under msrun; fail fast with the first failing rank's last lines."""
    run_dir = run_dir.resolve()
    logs = run_dir / "logs"
    for stale in logs.glob("rank_*.exit"):
        stale.unlink()
    env = dict(os.environ)
    # msrun starts `python` from PATH: make it this interpreter.
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    cmd = command(cfg, run_dir)
    print("launch:", shlex.join(cmd), flush=True)
    started = time.time()
    proc = subprocess.Popen(cmd, cwd=run_dir, env=env, start_new_session=True)
    try:
        failed = _wait(proc, logs, num_devices(cfg.hardware))
    except KeyboardInterrupt:
        os.killpg(proc.pid, signal.SIGINT)   # the ranks checkpoint and stop (graceful stop)
        proc.wait()
        raise
    if failed is not None or proc.returncode != 0:
        raise PretrainRunError(_failure_message(logs, failed, proc.returncode))
    return {"wall_s": time.time() - started}


def _wait(proc: subprocess.Popen, logs: Path, world: int) -> Optional[dict]:
    """Wait for msrun; return the first rank whose exit status is non-zero (then stop the others)."""
    while proc.poll() is None:
        for status in sorted(logs.glob("rank_*.exit")):
            info = json.loads(status.read_text())
            if info["exit"] != 0:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                return info
        time.sleep(0.5)
    exits = [json.loads(p.read_text()) for p in logs.glob("rank_*.exit")]
    return next((e for e in exits if e["exit"] != 0), None)


def _failure_message(logs: Path, failed: Optional[dict], msrun_code: int) -> str:
    if failed is not None:
        rank, what = failed["rank"], f"exited with code {failed['exit']}"
    else:   # no status file: the rank was killed (kill -9, OOM) before it could write one
        done = {int(p.stem.split("_")[1]) for p in logs.glob("rank_*.exit")}
        missing = sorted(set(range(len(list(logs.glob("worker_*.log"))))) - done)
        rank, what = (missing[0] if missing else 0), f"died without an exit status (killed?); msrun exit {msrun_code}"
    tail = _last_lines(logs / f"worker_{rank}.log")
    return f"rank {rank} {what}; the run resumes from its last checkpoint when relaunched. " \
           f"Last lines of {logs / f'worker_{rank}.log'}: " + " | ".join(tail)


def _last_lines(log: Path) -> List[str]:
    if not log.is_file():
        return ["(no log)"]
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    useful = [ln for ln in lines if not ln.startswith(("[WARNING]", "[INFO]"))]
    return (useful or lines)[-LAST_LINES:]
