"""Our training step vs a bare MindSpore step, on the same MindFormers model and batch.

    python -m pretrain.bench.train [rounds=20] [steps=1] [hydra overrides ...]
    python -m pretrain.bench.train compare=document_mask [rounds=20] [steps=1] [overrides ...]

compare=document_mask: TrainStep with data.document_mask=true vs false side by side (same initial
weights, the same real loader batch, alternating as below); prints both medians and their ratio.

bare_jit  : ms.value_and_grad + nn.AdamWeightDecay inside one @ms.jit function (one batch, Tensors).
bare_cell : the same two calls inside an nn.Cell's construct: the compile path TrainStep uses, which
            on MindSpore 2.9 CPU gives a faster graph than an @ms.jit function (see the figures).
step      : pretrain.train.step.TrainStep on that batch: LR fed as an input, global-norm clipping,
            the non-finite skip, AdamW with decay on matrices only.
-clip     : ablation, step with train.grad_clip=0 (the global norm is still measured: the skip
            needs it); the difference to step is what clipping costs.
loop      : Trainer.train_step with metrics on: the real BatchLoader batch of every step, TrainStep,
            then JSONL + TensorBoard + progress bar, as `python -m pretrain` runs it.
Each variant trains its own copy of the same initial weights. They alternate, `steps` at a time and
in a rotating order, for `rounds` rounds after a warm-up round (compiles), so background load hits
all of them alike; the medians of the per-step times are compared. The goal: loop <= 5 % over the
faster bare variant.
"""

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

_OPTIONS = ("rounds", "steps", "compare")


def timed_rounds(variants, rounds: int, steps: int):
    """Per-step times of each variant: round 0 compiles and warms up; then `rounds` rounds of
    `steps` steps each, in a rotating order, so background load hits all of them alike."""
    times = {k: [] for k in variants}
    order = list(variants)
    for rnd in range(rounds + 1):
        first_kind = rnd % len(order)  # rotated, so no variant always runs first
        for kind in order[first_kind:] + order[:first_kind]:
            for _ in range(steps):
                started = time.perf_counter()
                variants[kind]()
                if rnd:
                    times[kind].append(time.perf_counter() - started)
    return times


def compare_document_mask(overrides, rounds: int, steps: int) -> None:
    from pretrain.config.compose import compose
    from pretrain.config.resolved import ResolvedRun
    from pretrain.model import builder

    cfgs = {on: compose([*overrides, f"data.document_mask={str(on).lower()}"]) for on in (True, False)}
    cfg = cfgs[True]
    builder.prepare_environment(tempfile.mkdtemp(prefix="bench-docmask-"))

    import mindspore as ms
    from mindspore import Tensor

    from pretrain.data.prepare import prepare
    from pretrain.train.build import make_loader
    from pretrain.train.step import TrainStep, train_step_args
    from pretrain.train.trainer import split_micro

    t = cfg.train
    run = ResolvedRun.of(cfg)
    loader = make_loader(run, prepare(cfg.data, progress=False), run.phases[0], "train", 0, 1)
    micro = split_micro(loader.batch(0), int(t.grad_accum))
    init = None
    variant_steps = {}
    for on, c in cfgs.items():
        ms.set_seed(int(t.seed))
        net = builder.build_model(c)
        if init is None:
            init = {p.name: p.asnumpy().copy() for p in net.trainable_params()}
        else:
            ms.load_param_into_net(net, {k: ms.Parameter(Tensor(v), name=k) for k, v in init.items()})
        variant_steps["mask on" if on else "mask off"] = TrainStep(net, lr=1e-3, **train_step_args(c))
    variants = {k: (lambda s=s: s.step(micro, 1e-3)) for k, s in variant_steps.items()}
    med = {k: statistics.median(v) for k, v in timed_rounds(variants, rounds, steps).items()}
    seq = int(cfg.model.seq_length)
    tokens = int(t.global_batch_size) * seq
    docs = float((micro[0]["segment_ids"].max(1)).mean())
    print(f"\nmodel={cfg.model.name}, {int(t.global_batch_size)} x {seq} = {tokens} tokens/step, "
          f"{docs:.1f} documents per row, {os.cpu_count()} cores, {rounds} rounds x {steps} steps (medians)")
    for kind, m in med.items():
        print(f"{kind:10}{m:>9.3f} s/step{tokens / m:>10.0f} tokens/s")
    print(f"step time mask on / off: {med['mask on'] / med['mask off']:.3f}")


def main(argv) -> None:
    opts = dict(a.split("=", 1) for a in argv if a.split("=", 1)[0] in _OPTIONS)
    overrides = [a for a in argv if a.split("=", 1)[0] not in _OPTIONS]
    rounds, steps = int(opts.get("rounds", 20)), int(opts.get("steps", 1))
    if opts.get("compare") == "document_mask":
        compare_document_mask(overrides, rounds, steps)
        return
    if "compare" in opts:
        raise SystemExit(f"compare={opts['compare']}: the one comparison is compare=document_mask")

    from pretrain.config.compose import compose
    from pretrain.config.resolved import ResolvedRun
    from pretrain.model import builder

    cfg = compose(overrides)
    scratch = Path(tempfile.mkdtemp(prefix="bench-train-"))
    builder.prepare_environment(str(scratch))

    import mindspore as ms
    from mindspore import Tensor, nn

    from pretrain.data.prepare import prepare
    from pretrain.model.mindformers_config import document_attention
    from pretrain.plan.planner import flops_per_token, model_shape
    from pretrain.train.metrics import MetricsWriter
    from pretrain.resilience.identity import architecture
    from pretrain.train.build import make_loader
    from pretrain.train.schedule import phase_lr
    from pretrain.train.step import TrainStep, model_inputs, train_step_args
    from pretrain.train.trainer import PhaseInputs, Throughput, Trainer, split_micro

    t = cfg.train
    run = ResolvedRun.of(cfg)
    loader = make_loader(run, prepare(cfg.data, progress=False), run.phases[0], "train", 0, 1)
    batch = loader.batch(0)
    mode = document_attention(cfg)
    fixed = model_inputs(batch, mode)
    tokens = int(t.global_batch_size) * int(cfg.model.seq_length)

    ms.set_seed(int(t.seed))
    net = builder.build_model(cfg)
    init = {p.name: p.asnumpy().copy() for p in net.trainable_params()}

    def model():
        # one model per variant, each with the same initial weights, as each would train alone
        copy = builder.build_model(cfg)
        ms.load_param_into_net(copy, {k: ms.Parameter(Tensor(v), name=k) for k, v in init.items()})
        return copy

    def adamw(net):
        return nn.AdamWeightDecay(
            net.trainable_params(),
            learning_rate=1e-3,
            beta1=t.adam_beta1,
            beta2=t.adam_beta2,
            eps=t.adam_eps,
            weight_decay=t.weight_decay,
        )

    # bare_jit: what a MindSpore user writes first
    jit_opt = adamw(net)

    def call(model, x, y, mask, pos, doc):
        # the model's inputs for the run's document-attention mode; [0] is its cross-entropy sum
        # (calculate_per_token_loss), which the bare variants optimise as is: a timing baseline
        if mode == "mask":
            return model(input_ids=x, labels=y, loss_mask=mask, position_ids=pos, attention_mask=doc)[0]
        if mode == "compressed":
            return model(input_ids=x, labels=y, loss_mask=mask, position_ids=pos, actual_seq_len=doc)[0]
        return model(input_ids=x, labels=y, loss_mask=mask)[0]

    def forward(x, y, mask, pos, doc):
        return call(net, x, y, mask, pos, doc)

    grad_fn = ms.value_and_grad(forward, None, jit_opt.parameters)

    @ms.jit
    def bare_jit(x, y, mask, pos, doc):
        loss, grads = grad_fn(x, y, mask, pos, doc)
        jit_opt(grads)
        return loss

    # bare_cell: the same, compiled through nn.Cell
    class BareCell(nn.Cell):
        def __init__(self, net):
            super().__init__(auto_prefix=False)
            self.net, self.optimizer = net, adamw(net)
            self.grad_fn = ms.value_and_grad(self.forward, None, self.optimizer.parameters)

        def forward(self, x, y, mask, pos, doc):
            return call(self.net, x, y, mask, pos, doc)

        def construct(self, x, y, mask, pos, doc):
            loss, grads = self.grad_fn(x, y, mask, pos, doc)
            self.optimizer(grads)
            return loss

    bare_cell = BareCell(model())

    # step and loop: ours; the ablations: the same step without one of its parts
    kwargs = dict(lr=1e-3, **train_step_args(cfg))
    ours = TrainStep(model(), **kwargs)
    no_clip = TrainStep(model(), **{**kwargs, "grad_clip": 0.0})
    micro = split_micro(batch, int(t.grad_accum))
    metrics = MetricsWriter(scratch)
    seq = int(cfg.model.seq_length)
    trainer = Trainer(
        TrainStep(model(), **kwargs),
        metrics=metrics,
        grad_accum=int(t.grad_accum),
        arch=architecture(cfg),
        throughput=Throughput(
            tokens, 1, flops_per_token(model_shape(cfg.model), seq), float(cfg.hardware.peak_tflops) * 1e12
        ),
    )
    total = (rounds + 1) * steps
    phase = run.phases[0]
    plan = PhaseInputs(phase.name, phase_lr(phase.name, total, phase.node.lr, 0.0), loader, None)
    trainer.state.phase = plan.name
    metrics.start_phase(plan.name, total)

    def loop():
        record = trainer.train_step(plan)
        metrics.progress(record)
        metrics.log(record)

    variants = {
        "bare_jit": lambda: bare_jit(*fixed).asnumpy(),
        "bare_cell": lambda: bare_cell(*fixed).asnumpy(),
        "step": lambda: ours.step(micro, 1e-3),
        "-clip": lambda: no_clip.step(micro, 1e-3),
        "loop": loop,
    }
    times = timed_rounds(variants, rounds, steps)
    metrics.close()

    med = {k: statistics.median(v) for k, v in times.items()}
    base = min(med["bare_jit"], med["bare_cell"])
    params = sum(int(p.size) for p in net.trainable_params())
    print(
        f"\nmodel={cfg.model.name} ({params:,} params), {int(t.global_batch_size)} x {seq} = {tokens} "
        f"tokens/step, {os.cpu_count()} cores, {rounds} rounds x {steps} steps (medians)"
    )
    print(f"{'':10}{'s/step':>9}{'tokens/s':>10}{'vs faster bare':>16}")
    for kind in variants:
        print(f"{kind:10}{med[kind]:>9.3f}{tokens / med[kind]:>10.0f}{(med[kind] / base - 1) * 100:>+15.1f}%")
    overhead = (med["loop"] / base - 1) * 100
    print(
        f"our loop costs {overhead:+.1f}% over the faster bare step (goal <= +5%): "
        f"{'met' if overhead <= 5 else 'NOT met'}"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
