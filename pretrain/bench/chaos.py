"""Goodput under chaos: a 2-node job on this host (hardware=cpu_2x1, the job controller) under a
fault schedule drawn from a stated MTBF, against the same job uninterrupted.

    python -m pretrain.bench.chaos [--steps 3000] [--mtbf-s 300] [--seed 0] [--kinds K,...] [--faults N]
                                   [OVERRIDES ...]

Faults (exponential inter-arrival times with mean --mtbf-s, from the first checkpoint on, kinds in turn):
- kill_node1 / kill_node0: kill -9 of a node's whole process tree;
- stop_rank1: SIGSTOP of a rank (its peer's watchdog fires after resilience.watchdog_timeout_s,
  10 s here);
- corrupt_newest: bytes flipped in the newest checkpoint's weights, then node 1 killed: the
  restart must fall back to the previous verified checkpoint (its manifest's sha256), so the steps
  lost count from that one;
- disk_full: the run's checkpoints live on a small tmpfs of their own (mounted here, so a full
  disk never touches the real one); the fault fills it, the next save fails with ENOSPC, nothing
  half-written is published, and the run stops with one `error:` line (a restart cannot free a
  disk). The benchmark then plays the operator: it frees the space and runs the same command
  again, which resumes from the newest verified checkpoint.
For each: detection time (fault -> the controller's `restart` event; disk_full: -> the run's
stop), time to the first step after, steps lost (last step logged -> the step the ranks resumed
from), and of that recovery the part that was process start + rendezvous + model build +
checkpoint load (restart -> `resume` event) and graph compile + the first step (`resume` -> the
first step line). Then the effective-training-time ratio, goodput = final steps x median step
time / wall, and whether the final weights are the uninterrupted run's (sha256 of the fp32
parameters). Needs root (network namespaces, the tmpfs).
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
from typing import Any, Dict, List, Optional

from pretrain.config.shrunken import SMALL_MODEL
from pretrain.launch.faults import BALLAST, checkpoint_fs, corrupt_newest, fill
from pretrain.resilience import goodput
from pretrain.resilience.observe import accounting, lines

NODES = ["parallel=dp2", "hardware=cpu_2x1"]
KINDS = ["kill_node1", "corrupt_newest", "disk_full", "stop_rank1", "kill_node0"]


def _start(cwd: Path, run: str, args: List[str], mode: str = "w") -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env.setdefault("PRETRAIN_CACHE", str(cwd / "cache"))
    with open(cwd / f"{run}.out", mode) as out:
        return subprocess.Popen([sys.executable, "-m", "pretrain", *args, f"run_dir={run}"], cwd=cwd, env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _tree_of(run_dir: Path, rank: int) -> List[int]:
    from pretrain.launch import tree
    tag = tree.tag_of(int((run_dir / "logs" / f"rank_{rank}.pid").read_text()))
    return tree.tagged([tag]) if tag else []


def _fault(kind: str, run_dir: Path) -> Dict[str, Any]:
    from pretrain.launch import tree
    info: Dict[str, Any] = {}
    if kind == "corrupt_newest":
        step = corrupt_newest(run_dir / "checkpoints")
        if step is None:
            raise ValueError("no older checkpoint to fall back to yet")
        info["corrupted_step"] = step
    if kind == "disk_full":
        info["ballast_mb"] = round(fill(run_dir / "checkpoints") / 2 ** 20)
    elif kind == "stop_rank1":
        os.kill(int((run_dir / "logs" / "rank_1.pid").read_text()), signal.SIGSTOP)
    else:   # kill_node<r>; corrupt_newest: node 1, so the restart reads the corrupt checkpoint
        for pid in _tree_of(run_dir, int(kind[-1]) if kind.startswith("kill_node") else 1):
            tree.sigkill(pid)
    return info


def chaos(cwd: Path, args: List[str], mtbf_s: float, seed: int, kinds: List[str],
          max_faults: Optional[int] = None) -> Dict[str, Any]:
    rng = random.Random(seed)
    run_dir = cwd / "chaos"
    metrics, events = run_dir / "metrics.jsonl", run_dir / "events.jsonl"
    ckpts = checkpoint_fs(run_dir) if "disk_full" in kinds else None
    started = time.time()
    proc = _start(cwd, "chaos", args)
    faults: List[Dict[str, Any]] = []
    stops: List[str] = []
    next_at = started + rng.expovariate(1 / mtbf_s)
    try:
        while True:
            if proc.poll() is not None:
                f = faults[-1] if faults else None
                if proc.returncode == 0 or f is None or f["kind"] != "disk_full" or "relaunched" in f:
                    break
                # the run stopped on the full disk: the operator frees it and runs the command again
                out = (cwd / "chaos.out").read_text(errors="replace").splitlines()
                stops.append(([ln for ln in out if ln.startswith("error:")] or ["(no error line)"])[-1])
                f.update(detected_s=time.time() - f["at"], stop_exit=proc.returncode,
                         last_step=max([r["step"] for r in lines(metrics, "train")], default=0))
                (ckpts / BALLAST).unlink()
                f["restart_ts"] = f["relaunched"] = time.time()
                proc = _start(cwd, "chaos", args, mode="a")
                continue
            time.sleep(0.1)
            steps = lines(metrics, "train")
            pending = faults and "first_step_s" not in faults[-1]
            if pending:
                f = faults[-1]
                restarts = [e for e in lines(events, "restart") if e["ts"] >= f["at"]]
                if restarts and "restart_ts" not in f:
                    r = restarts[0]
                    f.update(detected_s=r["failed_at"] - f["at"], last_step=r["last_step"],
                             restart_ts=r["ts"])
                since = f.get("restart_ts", float("inf"))
                resumed = [e for e in lines(events, "resume") if e["ts"] >= since]
                # the ranks cut metrics.jsonl back to their checkpoint before they log `resume`, so
                # a line for the step after it is the restarted job's first (not a survivor's)
                if resumed and any(r["step"] == resumed[0]["step"] + 1 for r in steps):
                    f["first_step_s"] = time.time() - f["at"]
                    f["resume_step"] = resumed[0]["step"]
                    f["steps_lost"] = f["last_step"] - resumed[0]["step"]
                    f["start_build_load_s"] = resumed[0]["ts"] - f["restart_ts"]
                    f["compile_first_step_s"] = f["at"] + f["first_step_s"] - resumed[0]["ts"]
                    f["fallbacks"] = [e["step"] for e in lines(events, "fallback") if e["ts"] >= f["at"]]
                    next_at = time.time() + rng.expovariate(1 / mtbf_s)
                continue
            if max_faults is not None and len(faults) >= max_faults:
                continue
            # from the first checkpoint on: a crash before it restarts from scratch, which has no resume
            if time.time() >= next_at and steps and (run_dir / "checkpoints" / "latest").is_file() \
                    and (run_dir / "logs" / "rank_1.pid").is_file():
                kind = kinds[len(faults) % len(kinds)]
                try:
                    info = _fault(kind, run_dir)
                except (OSError, ValueError):   # a rank between generations, no older checkpoint: shortly
                    continue
                faults.append({"kind": kind, "at": time.time(), "step": steps[-1]["step"], **info})
    finally:
        if ckpts is not None:
            proc.wait()
            subprocess.run(["umount", "-l", str(ckpts)], check=False)
    wall = time.time() - started
    final = {int(p.stem.split("_")[1]): json.loads(p.read_text())
             for p in (run_dir / "logs").glob("rank_*.exit")}
    steps = {r["step"]: r for r in lines(metrics, "train")}
    return {"exit": proc.returncode, "wall_s": wall, "faults": faults, "steps": len(steps), "stops": stops,
            "step_times": [r["step_time_s"] for r in steps.values()], "started": started,
            "params": final.get(0, {}).get("params_sha256")}


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main(argv: List[str] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--mtbf-s", type=float, default=300.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kinds", default=",".join(KINDS), help=f"fault kinds in turn (of {','.join(KINDS)})")
    ap.add_argument("--faults", type=int, default=None, help="at most this many faults (default: no limit)")
    ap.add_argument("--reference-alongside", action="store_true",
                    help="run the uninterrupted job at the same time (half the wall; both on a busier host)")
    ap.add_argument("overrides", nargs="*")
    a = ap.parse_args(argv)
    kinds = a.kinds.split(",")
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        print(f"error: --kinds {','.join(unknown)}: unknown; known: {','.join(KINDS)}", file=sys.stderr)
        return 2
    tokens = a.steps * 8 * 64 * 10 // 7 + 1   # phase general: 0.7 of the tokens, 8 x 64 per step
    args = [*NODES, *SMALL_MODEL, "train.eval_every=0", "phase=general", f"train.total_tokens={tokens}",
            "train.save_every_steps=25", "resilience.max_restarts=1000", "resilience.watchdog_timeout_s=10",
            *a.overrides]
    loads = [_load()]
    with tempfile.TemporaryDirectory(prefix="pretrain-chaos-") as tmp:
        cwd = Path(tmp)
        if "PRETRAIN_CACHE" not in os.environ:
            os.environ["PRETRAIN_CACHE"] = str(cwd / "cache")
        if a.reference_alongside:
            ref_started, ref = time.time(), _start(cwd, "reference", args)
        result = chaos(cwd, args, a.mtbf_s, a.seed, kinds, a.faults)
        loads.append(_load())
        if not a.reference_alongside:
            ref_started, ref = time.time(), _start(cwd, "reference", args)
        ref.wait()
        ref_wall = time.time() - ref_started
        loads.append(_load())
        ref_params = json.loads((cwd / "reference" / "logs" / "rank_0.exit").read_text()).get("params_sha256")
        if result["exit"] != 0:
            print((cwd / "chaos.out").read_text()[-3000:])
        median = statistics.median(result["step_times"][1:]) if len(result["step_times"]) > 1 else float("nan")
        acct = accounting(cwd / "chaos", result, median)   # reads the run's files: before they are removed
    print(f"chaos: {result['steps']} steps in {result['wall_s']:.0f} s, exit {result['exit']}, "
          f"{len(result['faults'])} faults (MTBF {a.mtbf_s:g} s); uninterrupted: {ref_wall:.0f} s"
          f"{' (run alongside)' if a.reference_alongside else ''}; "
          f"load average (1/5/15 min) at start, after chaos, after the reference: {' | '.join(loads)}")
    print(f"{'fault':<15}{'at step':>8}{'detect s':>10}{'first step s':>14}{'lost':>6}"
          f"{'start+build+load s':>20}{'compile+step s':>16}  notes")
    for f in result["faults"]:
        def g(k):
            v = f.get(k)
            return "-" if v is None else (f"{v:.1f}" if isinstance(v, float) else str(v))
        notes = []
        if "corrupted_step" in f:
            notes.append(f"corrupted step {f['corrupted_step']}, resumed from {g('resume_step')}"
                         f" (fallback past {f.get('fallbacks')})")
        if "stop_exit" in f:
            notes.append(f"stopped with exit {f['stop_exit']}, space freed, same command again")
        if "restart_ts" not in f:
            notes.append("the run ended before it told")
        print(f"{f['kind']:<15}{f['step']:>8}{g('detected_s'):>10}{g('first_step_s'):>14}{g('steps_lost'):>6}"
              f"{g('start_build_load_s'):>20}{g('compile_first_step_s'):>16}  {'; '.join(notes)}")
    for line in result["stops"][:1]:
        print(f"the run's line on the full disk: {line}")
    print(f"goodput (steps x median step {median:.3f} s / wall): {acct.goodput:.1%}; "
          f"the uninterrupted run's: {goodput.goodput_of(result['steps'], median, ref_wall):.1%}; "
          f"chaos wall / uninterrupted wall: "
          f"{ref_wall / result['wall_s']:.1%}")
    print(goodput.format_line(acct))
    print(f"final weights equal the uninterrupted run's: {result['params'] == ref_params}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
