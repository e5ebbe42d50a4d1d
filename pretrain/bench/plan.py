"""Planned vs measured, after one calibration: step time and memory of runnable CPU configs.

    python -m pretrain.bench.plan [steps=24] [repeats=1] [out=bench-plan] [overrides ...]

1. Calibrate once per hardware option: `plan.calibrate=true` at sequence 64, batch 8 (the probe: one
   process; 8 and 16 rows at 64, 8 rows at 32) for `hardware=cpu`; for `hardware=cpu_2proc`, whose
   step (two processes sharing the cores, the all-reduce) one process cannot measure, two real dp2
   runs at sequence 64, batch 8 and 16 in one micro-batch per rank (as the probe's two sizes), of
   twice `steps`, record their points (as every run does) and take how the rate grows with the
   sequence from the probe. Sequence 128 is then measured, never calibrated: the plan extrapolates to
   it from the lengths 32 and 64, and to two micro-batches a step (global batch 16) from one.
2. Each config below trains `steps` steps of phase general in its own run dir, as a user runs it
   (`python -m pretrain ...`), with the calibration as step 1 left it (the file is put back before
   each run, so no measured config calibrates another). plan.json holds what its launch planned,
   summary.json what it measured (median step after compile, peak host memory of rank 0).
3. A table: planned and measured step time and process memory per config, their ratio, and whether
   the step is within 15%; for dp2, the planned and measured gradient all-reduce ("ar"). Process
   wall time of each run is given too. Results go to OUT/results.json.
4. `repeats=N` runs the whole round N times (calibration included, each in OUT/round-K) and judges
   each config by the median of its N ratios: step times on this VM move by tens of percent between
   runs minutes apart, more than the 15% being judged.

The configs: single device and dp2, sequence 64 and 128, global batch 8 and 16, on a model between the
tests' shrunken one and tiny (hidden 128, 4 layers), so a step is compute, not only overhead.
"""
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from pretrain.plan.tolerance import medians, row_line, table

MODEL = ["model.hidden_size=128", "model.num_layers=4", "model.num_heads=4", "model.num_kv_heads=2",
         "model.ffn_hidden_size=344", "model.max_position_embeddings=128"]
SINGLE = [(64, 8), (128, 8), (64, 16), (128, 16)]
DP2_CALIBRATION = [(64, 8), (64, 16)]   # the probe's at its length
DP2 = [(128, 8), (128, 16)]


def _run(args, env, cwd):
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pretrain", *args], env=env, cwd=cwd, capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): python -m pretrain {' '.join(args)}\n{proc.stderr[-3000:]}")
    return time.perf_counter() - started


def _config(hardware, seq, batch, steps, extra):
    parallel = "parallel=dp2" if hardware == "cpu_2proc" else "parallel=single"
    return [*MODEL, f"hardware={hardware}", parallel, f"model.seq_length={seq}", f"train.global_batch_size={batch}",
            "phase=general", f"train.total_tokens={steps * seq * batch}", "train.eval_every=0",
            "train.save_every_steps=1000000", *extra]


def main(argv):
    opts = dict(a.split("=", 1) for a in argv if a.split("=", 1)[0] in ("steps", "out", "repeats"))
    extra = [a for a in argv if a.split("=", 1)[0] not in ("steps", "out", "repeats")]
    steps, out = int(opts.get("steps", 24)), Path(opts.get("out", "bench-plan")).resolve()
    repeats = int(opts.get("repeats", 1))
    rounds = []
    for k in range(repeats):
        if repeats > 1:
            print(f"round {k + 1} of {repeats}", flush=True)
        rounds.append(one_round(out / f"round-{k + 1}" if repeats > 1 else out, steps, extra))
        print(table(rounds[-1]), flush=True)
    (out / "results.json").write_text(json.dumps(rounds if repeats > 1 else rounds[0], indent=1))
    if repeats > 1:
        print(medians(rounds))


def one_round(out, steps, extra):
    """Calibrate, then run and compare every config; the rows of the table."""
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PRETRAIN_CACHE": str(out / "cache")}
    calibrations = out / "cache" / "calibration"
    shutil.rmtree(calibrations, ignore_errors=True)

    print("calibrating: cpu by the probe, cpu_2proc by two dp2 runs ...", flush=True)
    _run([*_config("cpu", *SINGLE[0], steps, extra), "plan.calibrate=true", "dry_run=true",
          f"run_dir={out / 'runs' / 'probe'}"], env, out)
    for seq, batch in DP2_CALIBRATION:
        one_micro_batch = [f"parallel.micro_batch_size={batch // 2}", *extra]
        _run([*_config("cpu_2proc", seq, batch, 2 * steps, one_micro_batch),
              f"run_dir={out / 'runs' / f'cal-{seq}-{batch}'}"], env, out)
    kept = out / "calibration-used"
    shutil.rmtree(kept, ignore_errors=True)
    shutil.copytree(calibrations, kept)

    rows = []
    for hardware, configs in (("cpu", SINGLE), ("cpu_2proc", DP2)):
        for seq, batch in configs:
            shutil.rmtree(calibrations)
            shutil.copytree(kept, calibrations)
            run = out / "runs" / f"{hardware}-{seq}-{batch}"
            shutil.rmtree(run, ignore_errors=True)
            wall = _run([*_config(hardware, seq, batch, steps, extra), f"run_dir={run}"], env, out)
            plan = json.loads((run / "plan.json").read_text())
            summary = json.loads((run / "summary.json").read_text())
            measured, phase = summary["measured"], summary["phases"][0]["measured"]
            rows.append({"hardware": hardware, "seq": seq, "batch": batch, "planned_step_s": plan["step_s"],
                         "measured_step_s": measured["step_s"],
                         "planned_gb": plan["peak_gb"] + plan["framework_gb"],
                         "measured_gb": measured["memory_gb"], "wall_s": wall, "source": plan["calibration"],
                         "planned_comm_s": plan["comm"]["dp_s"], "measured_comm_s": phase.get("comm_s")})
            print(row_line(rows[-1]), flush=True)
    (out / "results.json").write_text(json.dumps(rows, indent=1))
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
