"""Goodput under chaos: a 2-node job on this host (hardware=cpu_2x1, the job controller) under a
fault schedule drawn from a stated MTBF, against the same job uninterrupted.

    python -m pretrain.bench.chaos [--steps 3000] [--mtbf-s 300] [--seed 0] [OVERRIDES ...]

Faults (exponential inter-arrival times with mean --mtbf-s, kinds in turn): kill -9 of a node's
whole process tree (node 1, then node 0), SIGSTOP of a rank (its peer's watchdog fires after
resilience.watchdog_timeout_s, 10 s here). For each: detection time (fault -> the controller's
`restart` event), time to the first step after, steps lost, and of that recovery the part that
was process start + rendezvous + model build + checkpoint load (restart -> `resume` event) and
graph compile + the first step (`resume` -> the first step line). Then the effective-training-time
ratio, goodput = final steps x median step time / wall, and whether the final weights are the
uninterrupted run's (sha256 of the fp32 parameters). Needs root (network namespaces).
"""
import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

from pretrain.bench import SMALL_MODEL

NODES = ["parallel=dp2", "hardware=cpu_2x1"]


def _lines(path: Path, kind: str) -> List[Dict[str, Any]]:
    try:
        text = path.read_text()
    except OSError:
        return []
    out = []
    for ln in text.splitlines():
        if f'"kind": "{kind}"' in ln and ln.endswith("}"):
            out.append(json.loads(ln))
    return out


def _start(cwd: Path, run: str, args: List[str]) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env.setdefault("PRETRAIN_CACHE", str(cwd / "cache"))
    with open(cwd / f"{run}.out", "w") as out:
        return subprocess.Popen([sys.executable, "-m", "pretrain", *args, f"run_dir={run}"], cwd=cwd, env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _tree_of(run_dir: Path, rank: int) -> List[int]:
    from pretrain.launch import tree
    pid = int((run_dir / "logs" / f"rank_{rank}.pid").read_text())
    env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    tags = [e.split(b"=", 1)[1].decode() for e in env if e.startswith(tree.TAG_ENV.encode() + b"=")]
    return tree.tagged(tags)


def _fault(kind: str, run_dir: Path) -> None:
    from pretrain.launch import tree
    if kind.startswith("kill_node"):
        for pid in _tree_of(run_dir, int(kind[-1])):
            tree.sigkill(pid)
    else:   # stop_rank1
        os.kill(int((run_dir / "logs" / "rank_1.pid").read_text()), signal.SIGSTOP)


def chaos(cwd: Path, args: List[str], mtbf_s: float, seed: int) -> Dict[str, Any]:
    rng = random.Random(seed)
    run_dir = cwd / "chaos"
    metrics, events = run_dir / "metrics.jsonl", run_dir / "events.jsonl"
    kinds = ["kill_node1", "stop_rank1", "kill_node0"]
    started = time.time()
    proc = _start(cwd, "chaos", args)
    faults: List[Dict[str, Any]] = []
    next_at = started + rng.expovariate(1 / mtbf_s)
    while proc.poll() is None:
        time.sleep(0.1)
        steps = _lines(metrics, "train")
        pending = faults and "first_step_s" not in faults[-1]
        if pending:
            f = faults[-1]
            restarts = [e for e in _lines(events, "restart") if e["ts"] >= f["at"]]
            if restarts and "detected_s" not in f:
                r = restarts[0]
                # a step the survivors finished after the fault is not the restarted job's first
                f.update(detected_s=r["failed_at"] - f["at"], steps_lost=r["steps_lost"], restart_ts=r["ts"],
                         lines=len(steps))
            if "restart_ts" in f and len(steps) > f["lines"]:
                f["first_step_s"] = time.time() - f["at"]
                resumed = [e for e in _lines(events, "resume") if e["ts"] >= f["restart_ts"]]
                if resumed:
                    f["start_build_load_s"] = resumed[0]["ts"] - f["restart_ts"]
                    f["compile_first_step_s"] = f["at"] + f["first_step_s"] - resumed[0]["ts"]
                next_at = time.time() + rng.expovariate(1 / mtbf_s)
            continue
        if time.time() >= next_at and steps and (run_dir / "logs" / "rank_1.pid").is_file():
            kind = kinds[len(faults) % len(kinds)]
            try:
                _fault(kind, run_dir)
            except (OSError, ValueError):   # a rank between generations: try again shortly
                continue
            faults.append({"kind": kind, "at": time.time(), "step": steps[-1]["step"], "lines": len(steps)})
    wall = time.time() - started
    final = {int(p.stem.split("_")[1]): json.loads(p.read_text())
             for p in (run_dir / "logs").glob("rank_*.exit")}
    steps = {r["step"]: r for r in _lines(metrics, "train")}
    return {"exit": proc.returncode, "wall_s": wall, "faults": faults, "steps": len(steps),
            "step_times": [r["step_time_s"] for r in steps.values()],
            "params": final.get(0, {}).get("params_sha256")}


def main(argv: List[str] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--mtbf-s", type=float, default=300.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("overrides", nargs="*")
    a = ap.parse_args(argv)
    tokens = a.steps * 8 * 64 * 10 // 7 + 1   # phase general: 0.7 of the tokens, 8 x 64 per step
    args = [*NODES, *SMALL_MODEL, "train.eval_every=0", "phase=general", f"train.total_tokens={tokens}",
            "train.save_every_steps=25", "resilience.max_restarts=1000", "resilience.watchdog_timeout_s=10",
            *a.overrides]
    with tempfile.TemporaryDirectory(prefix="pretrain-chaos-") as tmp:
        cwd = Path(tmp)
        if "PRETRAIN_CACHE" not in os.environ:
            os.environ["PRETRAIN_CACHE"] = str(cwd / "cache")
        result = chaos(cwd, args, a.mtbf_s, a.seed)
        ref_started = time.time()
        ref = _start(cwd, "reference", args)
        ref.wait()
        ref_wall = time.time() - ref_started
        ref_params = json.loads((cwd / "reference" / "logs" / "rank_0.exit").read_text()).get("params_sha256")
        if result["exit"] != 0:
            print((cwd / "chaos.out").read_text()[-3000:])
    median = statistics.median(result["step_times"][1:]) if len(result["step_times"]) > 1 else float("nan")
    print(f"chaos: {result['steps']} steps in {result['wall_s']:.0f} s, exit {result['exit']}, "
          f"{len(result['faults'])} faults (MTBF {a.mtbf_s:g} s); uninterrupted: {ref_wall:.0f} s")
    print(f"{'fault':<12}{'at step':>8}{'detect s':>10}{'first step s':>14}{'lost':>6}"
          f"{'start+build+load s':>20}{'compile+step s':>16}")
    for f in result["faults"]:
        def g(k):
            v = f.get(k)
            return "-" if v is None else (f"{v:.1f}" if isinstance(v, float) else str(v))
        print(f"{f['kind']:<12}{f['step']:>8}{g('detected_s'):>10}{g('first_step_s'):>14}{g('steps_lost'):>6}"
              f"{g('start_build_load_s'):>20}{g('compile_first_step_s'):>16}")
    goodput = result["steps"] * median / result["wall_s"]
    print(f"goodput (steps x median step {median:.3f} s / wall): {goodput:.1%}; the uninterrupted run's: "
          f"{result['steps'] * median / ref_wall:.1%}; chaos wall / uninterrupted wall: "
          f"{ref_wall / result['wall_s']:.1%}")
    print(f"final weights equal the uninterrupted run's: {result['params'] == ref_params}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
