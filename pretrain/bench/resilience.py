"""Checkpoint save stall and load time, sync vs async, for a parameter set shaped like the Mcore
model of a config (default model=tiny, ~5M params) plus AdamWeightDecay moments.

    python -m pretrain.bench.resilience [model=tiny] [--repeats 5]

Prints medians over --repeats runs measured side by side in one process: the stall a save puts on
the training loop, the background write time (async), verify and load times, and how much a
compute-bound stand-in for a training step slows down while an async write runs beside it."""
import argparse
import os
import statistics
import tempfile
import time
from dataclasses import replace
from typing import Any, Dict, List


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


def main(argv: List[str] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*", default=["model=tiny"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10, help="proxy steps timed after each save")
    args = parser.parse_args(argv)

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
