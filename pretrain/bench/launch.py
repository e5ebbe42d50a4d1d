"""One process vs two msrun ranks (data parallel) on the same model and global batch, side by side.

    python -m pretrain.bench.launch [steps=30] [hydra overrides ...]

For each layout it runs `python -m pretrain` as a user would (phase=general, no evaluation) in a
scratch directory and reports, from the outside and from the run's metrics.jsonl:
  first_step_s   launch -> first metrics record (compose, plan, data check, process start-up,
                 init(), model build, graph compile, one step)
  ranks_up_s     dp2 only: launch -> every rank process started (msrun spawned them; their
                 rank_<r>.pid files exist)
  steady tok/s   median over steps 3.. of the logged tokens/s (global batch / step time)
  measured tok/s the launch's own figure (what a sweep records)
  wall_s         the whole command
Then it kills rank 1 of a dp2 run mid-training and reports how long the launch takes to exit.
The data cache is shared with other runs (PRETRAIN_CACHE); the first run may build it.
"""

import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

LAYOUTS = {"single": ["parallel=single", "hardware=cpu"], "dp2": ["parallel=dp2", "hardware=cpu_2proc"]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_records(run: Path) -> List[dict]:
    path = run / "metrics.jsonl"
    if not path.is_file():
        return []
    return [r for r in map(json.loads, path.read_text().splitlines()) if r["kind"] == "train"]


def start(args: List[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pretrain", *args], cwd=cwd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def run_layout(name: str, overrides: List[str], steps: int) -> Dict[str, Optional[float]]:
    cwd = Path(tempfile.mkdtemp(prefix=f"bench-launch-{name}-"))
    run = cwd / "run"
    args = [*LAYOUTS[name], *overrides, "phase=general", "train.eval_every=0", f"run_dir={run}",
            f"hardware.master_port={free_port()}", f"train.total_tokens={tokens_for(steps, overrides)}"]
    t0 = time.perf_counter()
    proc = start(args, cwd)
    first = ranks_up = None
    while proc.poll() is None:
        now = time.perf_counter() - t0
        if ranks_up is None and name == "dp2" and len(list((run / "logs").glob("rank_*.pid"))) == 2:
            ranks_up = now
        if first is None and train_records(run):
            first = now
        time.sleep(0.05)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed:\n{proc.stderr.read()[-3000:]}")
    rates = [r["tokens_per_s"] for r in train_records(run)[2:]]
    from pretrain.launch import measured
    return {"first_step_s": first, "ranks_up_s": ranks_up, "steady": statistics.median(rates),
            "measured": measured(json.loads((run / "summary.json").read_text())).get("measured_tokens_per_s"),
            "wall_s": wall}


def tokens_for(steps: int, overrides: List[str]) -> int:
    """train.total_tokens that gives phase=general (70 % of them) `steps` steps."""
    from pretrain.config.compose import compose
    cfg = compose([*LAYOUTS["single"], *overrides])
    return int(steps * int(cfg.train.global_batch_size) * int(cfg.model.seq_length) / 0.7) + 1


def kill_detection(overrides: List[str], steps: int) -> float:
    cwd = Path(tempfile.mkdtemp(prefix="bench-launch-kill-"))
    run = cwd / "run"
    proc = start([*LAYOUTS["dp2"], *overrides, "phase=general", "train.eval_every=0", f"run_dir={run}",
                  f"hardware.master_port={free_port()}", f"train.total_tokens={tokens_for(steps * 10, overrides)}"],
                 cwd)
    while proc.poll() is None and len(train_records(run)) < 3:
        time.sleep(0.05)
    if proc.poll() is not None:
        raise SystemExit(f"the run to kill ended early:\n{proc.stderr.read()[-3000:]}")
    os.kill(int((run / "logs" / "rank_1.pid").read_text()), signal.SIGKILL)
    killed = time.perf_counter()
    proc.wait()
    return time.perf_counter() - killed


def main(argv: List[str]) -> None:
    steps = int(next((a.split("=", 1)[1] for a in argv if a.startswith("steps=")), 30))
    overrides = [a for a in argv if not a.startswith("steps=")]
    results = {name: run_layout(name, overrides, steps) for name in LAYOUTS}
    def fmt(v):
        return "-" if v is None else f"{v:9.1f}"
    print(f"{'layout':<8}{'first_step_s':>13}{'ranks_up_s':>11}{'steady tok/s':>13}{'measured tok/s':>15}{'wall_s':>8}")
    for name, r in results.items():
        print(f"{name:<8}{fmt(r['first_step_s']):>13}{fmt(r['ranks_up_s']):>11}{fmt(r['steady']):>13}"
              f"{fmt(r['measured']):>15}{fmt(r['wall_s']):>8}")
    single, dp2 = results["single"], results["dp2"]
    print(f"dp2 / single: steady tokens/s x{dp2['steady'] / single['steady']:.2f}, "
          f"measured x{dp2['measured'] / single['measured']:.2f}, "
          f"start-up (to first step) +{dp2['first_step_s'] - single['first_step_s']:.1f} s")
    print(f"kill -9 of rank 1 -> launch exited after {kill_detection(overrides, steps):.2f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
