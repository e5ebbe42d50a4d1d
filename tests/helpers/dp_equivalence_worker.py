"""One side of tests/test_train_tokens.py's data-parallel check (not a test module itself).

    python tests/helpers/dp_equivalence_worker.py OUT single          # one process, the global batch at once
    msrun ... python tests/helpers/dp_equivalence_worker.py OUT dp2   # each rank its half, grad_accum=2

Both train STEPS steps of the shrunken model from the same seed on the same global batch of four
packed rows whose valid-token counts are very uneven (rank 0's rows are nearly all padding), then
write the losses, token counts, gradient norms and final weights to OUT/<mode>[_rank<r>].npz.
"""

import os
import sys

import numpy as np

from tests.helpers.models import SHRINK  # msrun runs this file with PYTHONPATH=the checkout

SEQ, STEPS = 32, 2


def global_batch(step):
    """Four rows [doc | doc | ... | pad]; rows 0-1 hold 5 and 7 tokens, rows 2-3 are full."""
    from pretrain.data.loader import rows_to_batch

    rng = np.random.default_rng([7, step])
    rows = []
    for lens in ([5], [3, 4], [10, 12, 11], [33]):
        ids = np.zeros(SEQ + 1, np.int32)
        n = sum(lens)
        ids[:n] = rng.integers(4, 512, n)
        rows.append((ids, np.array(lens, np.int32)))
    return rows_to_batch(rows, SEQ)


def main(out, mode):
    if os.environ.get("MS_ROLE") == "MS_SCHED":   # msrun's scheduler: rendezvous only
        import mindspore as ms
        from mindspore.communication import init

        ms.set_context(device_target="CPU")
        init()
        return
    from pretrain.config.compose import compose
    from pretrain.model import builder
    from pretrain.train.step import TrainStep, train_step_args
    from pretrain.train.trainer import split_micro

    dp2 = mode == "dp2"
    overrides = [*SHRINK, f"train.grad_accum={2 if dp2 else 1}"]
    if dp2:
        overrides += ["parallel=dp2", "hardware=cpu_2proc"]
    cfg = compose(overrides)
    rank = int(os.environ.get("RANK_ID", "0"))
    os.environ.setdefault("LOCAL_DEFAULT_PATH", os.path.join(out, f"mf_{mode}_{rank}"))

    import mindspore as ms

    ms.set_seed(0)   # as the runner does: the same initial weights in both modes and on both ranks
    net = builder.build_model(cfg)
    step = TrainStep(net, lr=0.0, **train_step_args(cfg))
    assert step.data_parallel == (2 if dp2 else 1)
    losses, tokens, norms = [], [], []
    for s in range(STEPS):
        batch = global_batch(s)
        if dp2:
            batch = {k: v[2 * rank: 2 * rank + 2] for k, v in batch.items()}
        result = step.step(split_micro(batch, int(cfg.train.grad_accum)), 1e-2)
        losses.append(result["loss"])
        tokens.append(result["tokens"])
        norms.append(result["grad_norm"])
    weights = {p.name: p.asnumpy() for p in net.trainable_params()}
    np.savez(os.path.join(out, f"{mode}_rank{rank}.npz"), losses=np.array(losses), tokens=np.array(tokens),
             grad_norms=np.array(norms),
             **{f"w:{k}": v for k, v in weights.items()})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
