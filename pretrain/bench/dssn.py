"""Depth-scaled sandwich norm on vs off at a high LR, on a shrunken deep Pangu (a benchmark, not a test).

    python -m pretrain.bench.dssn [hydra overrides ...]

Trains the same config twice with `python -m pretrain` (our loop, one CPU process, same data and
seed), model.sandwich_norm=true and =false, both with TinyInit; then prints the loss and gradient-norm
curves side by side (every 10th step) and the spike counts, and writes dssn.png (both curves) into the
scratch dir it names. Default: Pangu Ultra shrunk to 16 layers of width 64 (vocab 4096, seq 64,
batch 8), peak LR 1e-2 (ten times the tiny model's), no gradient clipping (train.grad_clip=0), so a
spike is not clipped away; 0.7 x 143360 / 512 = 196 steps of phase general.

A loss spike: a step whose loss exceeds the median of the previous 10 steps by more than 0.5 nats
(after the first 10). A grad-norm spike: a step whose gradient norm exceeds 3x that median.
"""

import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List

DEEP = ["model=pangu_ultra_135b", "model.hidden_size=64", "model.num_layers=16", "model.num_heads=4",
        "model.num_kv_heads=2", "model.ffn_hidden_size=128", "model.seq_length=64",
        "model.max_position_embeddings=64", "model.vocab_size=4096", "model.global_batch_size=8",
        "model.lr_peak=1e-2", "train.grad_clip=0", "train.eval_every=0", "phase=general",
        "train.total_tokens=143360"]
WINDOW, LOSS_JUMP, GRAD_FACTOR = 10, 0.5, 3.0


def spikes(values: List[float], *, jump: float = 0.0, factor: float = 0.0) -> int:
    """Steps that exceed the median of the previous WINDOW steps by `jump` (additive) or `factor`x."""
    count = 0
    for i in range(WINDOW, len(values)):
        median = statistics.median(values[i - WINDOW:i])
        above = (jump and values[i] > median + jump) or (factor and values[i] > factor * median)
        if values[i] != values[i] or above:   # NaN counts as a spike
            count += 1
    return count


def train(overrides: List[str], scratch: Path, name: str) -> Dict[str, List[float]]:
    from pretrain.train.metrics import read_metrics

    run = scratch / name
    subprocess.run([sys.executable, "-m", "pretrain", *overrides, f"run_dir={run}"], check=True, cwd=scratch,
                   stdout=subprocess.DEVNULL, env=dict(os.environ))
    rows = [r for r in read_metrics(run / "metrics.jsonl") if r["kind"] == "train"]
    return {"loss": [r["loss"] for r in rows], "grad_norm": [r["grad_norm"] for r in rows]}


def plot(curves: Dict[str, Dict[str, List[float]]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_grad) = plt.subplots(1, 2, figsize=(11, 4))
    for name, c in curves.items():
        steps = range(1, len(c["loss"]) + 1)
        ax_loss.plot(steps, c["loss"], label=name)
        ax_grad.plot(steps, c["grad_norm"], label=name)
    ax_loss.set(xlabel="step", ylabel="loss", title="loss")
    ax_grad.set(xlabel="step", ylabel="grad norm", title="gradient norm (before clipping)", yscale="log")
    ax_loss.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path)


def main(argv: List[str]) -> None:
    overrides = [*DEEP, *argv]
    scratch = Path(tempfile.mkdtemp(prefix="bench-dssn-"))
    curves = {name: train([*overrides, f"model.sandwich_norm={flag}"], scratch, name)
              for name, flag in (("dssn", "true"), ("pre-norm", "false"))}
    names = list(curves)
    print(f"DSSN on vs off, {' '.join(argv) or 'defaults'}: {' '.join(DEEP)}")
    print(f"{'step':>5}  " + "  ".join(f"{n + ' loss':>14} {n + ' |g|':>14}" for n in names))
    length = min(len(c["loss"]) for c in curves.values())
    for i in list(range(0, length, 10)) + ([length - 1] if (length - 1) % 10 else []):
        print(f"{i + 1:>5}  " + "  ".join(f"{curves[n]['loss'][i]:>14.4f} {curves[n]['grad_norm'][i]:>14.4f}"
                                          for n in names))
    for n in names:
        c = curves[n]
        tail = c["loss"][-10:]
        print(f"{n}: loss spikes (> median of previous {WINDOW} + {LOSS_JUMP}) "
              f"{spikes(c['loss'], jump=LOSS_JUMP)}, grad-norm spikes (> {GRAD_FACTOR}x median) "
              f"{spikes(c['grad_norm'], factor=GRAD_FACTOR)}, mean loss of the last 10 steps "
              f"{sum(tail) / len(tail):.4f}, max grad norm {max(c['grad_norm']):.3f}")
    plot(curves, scratch / "dssn.png", "Pangu shrunk to 16 layers, LR 1e-2, no clipping: DSSN vs pre-norm")
    print(f"curves: {scratch / 'dssn.png'}")


if __name__ == "__main__":
    main(sys.argv[1:])
