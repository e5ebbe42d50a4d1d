"""Checkpoint save stall and load time, sync vs async, for a parameter set shaped like the Mcore
model of a config (default model=tiny, ~5M params) plus AdamWeightDecay moments.

    python -m pretrain.bench.resilience [model=tiny] [--repeats 5]

Prints medians over --repeats runs measured side by side in one process: the stall a save puts on
the training loop, the background write time (async), verify and load times, and how much a
compute-bound stand-in for a training step slows down while an async write runs beside it.

    python -m pretrain.bench.resilience --real [--kills 3] [OVERRIDES ...]

Real `python -m pretrain` runs (default: the shrunken tiny model of the resilience tests, 40 steps,
a checkpoint every 3 steps), sync and async saving side by side: the save stall of each checkpoint
against the training step, then kill -9 at random steps and restart: the resume time (process
start -> first resumed step, and the checkpoint load inside it) and the steps lost per crash."""
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
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List

from pretrain.config.shrunken import SMALL_MODEL

REAL_DEFAULT = [*SMALL_MODEL, "train.total_tokens=20480", "train.save_every_steps=3", "train.eval_every=0"]


def mcore_shaped_optimizer(model: Any) -> Any:
    """An AdamWeightDecay over parameters named and shaped like MindFormers' Mcore GPTModel."""
    import numpy as np
    import mindspore as ms
    from mindspore import Parameter, Tensor, nn

    h, ffn, vocab = model.hidden_size, model.ffn_hidden_size, model.vocab_size
    head_dim = model.head_dim or h // model.num_heads
    qkv = (model.num_heads + 2 * model.num_kv_heads) * head_dim
    shapes: Dict[str, tuple] = {"embedding.word_embeddings.weight": (vocab, h)}
    for i in range(model.num_layers):
        prefix = f"decoder.layers.{i}."
        shapes.update({prefix + "input_layernorm.weight": (h,),
                       prefix + "self_attention.linear_qkv.weight": (qkv, h),
                       prefix + "self_attention.linear_proj.weight": (h, model.num_heads * head_dim),
                       prefix + "pre_mlp_layernorm.weight": (h,),
                       prefix + "mlp.linear_fc1.weight": (2 * ffn, h),
                       prefix + "mlp.linear_fc2.weight": (h, ffn)})
    shapes["decoder.final_layernorm.weight"] = (h,)
    if not model.tie_embeddings:
        shapes["output_layer.weight"] = (vocab, h)
    rng = np.random.default_rng(0)
    params = [Parameter(Tensor(rng.normal(0, 0.02, s).astype(np.float32)), name=n) for n, s in shapes.items()]
    opt = nn.AdamWeightDecay(params, learning_rate=1e-3, weight_decay=0.1)
    grads = tuple(Tensor(rng.normal(0, 1e-3, p.shape).astype(np.float32)) for p in params)

    @ms.jit
    def update(g):
        return opt(g)
    update(grads)                          # non-zero moments, global_step 1: a realistic file
    return opt


def proxy_step() -> Any:
    """A compute-bound jitted function standing in for a training step (same cores, same runtime)."""
    import numpy as np
    import mindspore as ms
    from mindspore import Tensor, ops

    a = Tensor(np.random.default_rng(1).random((700, 700)).astype(np.float32))

    @ms.jit
    def step(x):
        for _ in range(12):
            x = ops.tanh(ops.matmul(x, x) * 0.001)
        return x

    step(a).asnumpy()
    return lambda: step(a).asnumpy()


def _records(path: Path, kind: str) -> List[Dict[str, Any]]:
    try:
        lines = path.read_text().split("\n")[:-1]     # complete lines only
    except FileNotFoundError:
        return []
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


def real_run(workdir: Path, overrides: List[str], kills: int, rng: random.Random) -> Dict[str, Any]:
    """One run of the CLI in `workdir`, killed (-9) `kills` times at random steps and restarted."""
    cache = os.environ.get("PRETRAIN_CACHE", str(Path(".cache/pretrain").resolve()))
    env = {**os.environ, "PRETRAIN_CACHE": cache}
    run = workdir / "runs"

    def records(name: str, kind: str) -> List[Dict[str, Any]]:
        return _records(next(run.glob(f"*/{name}"), run / "none"), kind)

    def start() -> Any:
        return subprocess.Popen([sys.executable, "-m", "pretrain", *overrides], cwd=workdir, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def wait_until(proc: Any, step: int, resumes: int) -> None:
        """Until the run logged `resumes` resume events and a train record of step >= `step`."""
        while not (len(records("events.jsonl", "resume")) >= resumes
                   and any(r["step"] >= step for r in records("metrics.jsonl", "train"))):
            if proc.poll() is not None:
                raise SystemExit(f"the run exited ({proc.returncode}) early; run it alone to see why")
            time.sleep(0.01)

    crashes: List[Dict[str, Any]] = []
    started, proc = time.perf_counter(), start()
    for k in range(kills):
        wait_until(proc, rng.randint(5 + k * 30 // kills, 4 + (k + 1) * 30 // kills), resumes=k)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        killed_after = records("metrics.jsonl", "train")[-1]["step"]
        started, proc = time.perf_counter(), start()
        wait_until(proc, 0, resumes=k + 1)
        resumed = records("events.jsonl", "resume")[-1]
        wait_until(proc, resumed["step"] + 1, resumes=k + 1)
        crashes.append({"killed_after": killed_after, "resume_s": time.perf_counter() - started,
                        "load_s": resumed["load_s"], "lost": killed_after - resumed["step"]})
    if proc.wait() != 0:
        raise SystemExit(f"the final run exited {proc.returncode}")
    train = records("metrics.jsonl", "train")
    saves = records("events.jsonl", "save")
    return {"crashes": crashes, "step_s": statistics.median(r["step_time_s"] for r in train[1:]),
            "stalls": [e["stall_s"] for e in saves],
            "mib": statistics.median(e["bytes"] for e in saves) / 2**20}


def real_main(overrides: List[str], kills: int, seed: int) -> None:
    print(f"python -m pretrain {' '.join(overrides)}  (kill -9 x {kills} per run, seed {seed}, "
          f"{os.cpu_count()} cores)", flush=True)
    results = {}
    for async_save in (False, True):
        with tempfile.TemporaryDirectory() as tmp:
            results[async_save] = real_run(Path(tmp), [*overrides, f"resilience.async_save={async_save}"],
                                           kills, random.Random(seed))
    print(f"{'':7}{'step':>9}{'save stall median / max':>26}{'stall/step':>12}{'checkpoint':>12}")
    for async_save, r in results.items():
        stall = statistics.median(r["stalls"])
        print(f"{'async' if async_save else 'sync':7}{r['step_s'] * 1e3:7.1f}ms{stall * 1e3:15.1f}ms / "
              f"{max(r['stalls']) * 1e3:5.1f}ms{stall / r['step_s']:12.2f}{r['mib']:9.1f}MiB")
    crashes = [c for r in results.values() for c in r["crashes"]]
    resume = statistics.median(c["resume_s"] for c in crashes)
    load = statistics.median(c["load_s"] for c in crashes)
    print(f"resume after kill -9 (n={len(crashes)}): process start -> first resumed step median "
          f"{resume:.1f} s (checkpoint load {load * 1e3:.0f} ms of it; the rest is start-up and compile)")
    print(f"steps lost per crash: {[c['lost'] for c in crashes]} (killed after steps "
          f"{[c['killed_after'] for c in crashes]}; at most train.save_every_steps)")


def main(argv: List[str] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10, help="proxy steps timed after each save")
    parser.add_argument("--real", action="store_true", help="time real CLI runs with kill -9 restarts")
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.real:
        real_main(args.overrides or REAL_DEFAULT, args.kills, args.seed)
        return
    args.overrides = args.overrides or ["model=tiny"]

    from pretrain.config.compose import compose
    from pretrain.resilience.checkpoint import CheckpointManager, verify

    cfg = compose(args.overrides)
    opt = mcore_shaped_optimizer(cfg.model)
    n_model = sum(p.size for p in opt.get_parameters()
                  if not p.name.startswith(("adam_", "global_step", "learning")))
    step = proxy_step()
    steps = args.steps

    def run_steps() -> None:
        for _ in range(steps):
            step()

    rows: Dict[str, List[float]] = {k: [] for k in ("steps_alone", "sync_stall", "sync_total", "async_stall",
                                                    "async_total", "async_durable", "verify", "load_verified",
                                                    "load_with_verify")}
    with tempfile.TemporaryDirectory() as tmp:
        sync = CheckpointManager(os.path.join(tmp, "sync"), keep_latest=2)
        asyn = CheckpointManager(os.path.join(tmp, "async"), keep_latest=2, async_save=True)
        for r in range(args.repeats):
            t = time.perf_counter()
            run_steps()
            rows["steps_alone"].append(time.perf_counter() - t)

            t = time.perf_counter()
            sync.save(r, opt, {"step": r})
            rows["sync_stall"].append(sync.last_stall_s)
            run_steps()
            rows["sync_total"].append(time.perf_counter() - t)

            t = time.perf_counter()
            asyn.save(r, opt, {"step": r})
            rows["async_stall"].append(asyn.last_stall_s)
            run_steps()                              # training goes on beside the writer
            asyn.wait()                              # ~0 when the write finished within the steps
            rows["async_total"].append(time.perf_counter() - t)
            t = time.perf_counter()
            asyn.save(r + 1000, opt, {"step": r})
            asyn.wait()
            rows["async_durable"].append(time.perf_counter() - t)

            info = sync.latest()
            t = time.perf_counter()
            verify(info.path)
            rows["verify"].append(time.perf_counter() - t)
            t = time.perf_counter()
            sync.load(info, opt)
            rows["load_verified"].append(time.perf_counter() - t)
            t = time.perf_counter()
            sync.load(replace(info, verified=False), opt)
            rows["load_with_verify"].append(time.perf_counter() - t)
        size = sum(f.stat().st_size for f in sync.latest().path.iterdir())

    med = {k: statistics.median(v) for k, v in rows.items()}
    step_s = med["steps_alone"] / steps
    lost_sync = med["sync_total"] - med["steps_alone"]
    lost_async = med["async_total"] - med["steps_alone"]
    print(f"model={cfg.model.name}: {n_model / 1e6:.2f}M params, checkpoint {size / 2**20:.1f} MiB "
          f"(weights + Adam m/v + state), {os.cpu_count()} cores, medians of {args.repeats}")
    print(f"  proxy training step            {step_s * 1e3:8.1f} ms  ({steps} steps run after each save)")
    print(f"  sync:  save stall              {med['sync_stall'] * 1e3:8.1f} ms")
    print(f"         training time lost      {lost_sync * 1e3:8.1f} ms  ({lost_sync / step_s:.2f} steps)")
    print(f"  async: save stall (snapshot)   {med['async_stall'] * 1e3:8.1f} ms")
    print(f"         until durable, idle     {med['async_durable'] * 1e3:8.1f} ms")
    print(f"         training time lost      {lost_async * 1e3:8.1f} ms  ({lost_async / step_s:.2f} steps; "
          f"the writer shares the cores)")
    print(f"  verify (size + sha256)         {med['verify'] * 1e3:8.1f} ms")
    print(f"  load, verified already         {med['load_verified'] * 1e3:8.1f} ms")
    print(f"  load incl. verify              {med['load_with_verify'] * 1e3:8.1f} ms")


if __name__ == "__main__":
    main()
