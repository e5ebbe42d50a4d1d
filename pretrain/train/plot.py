"""run_dir/loss_curve.png from run_dir/metrics.jsonl: train and validation loss above, learning
rate below, the phase boundaries marked on both. Reads the file, so it also draws a resumed run."""

import os
from pathlib import Path
from typing import Union

from pretrain.io import write_atomic
from pretrain.train.metrics import phase_boundaries, read_metrics

# lazy imports (matplotlib): by design; only a plot draws


def plot_curves(metrics_path: Union[str, os.PathLike], out_png: Union[str, os.PathLike]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt


    records = read_metrics(metrics_path)
    train = [r for r in records if r["kind"] == "train"]
    val = [r for r in records if r["kind"] == "val"]
    fig, (ax_loss, ax_lr) = plt.subplots(
        2, 1, figsize=(10, 7), sharex=True, gridspec_kw={"height_ratios": [2, 1]}
    )
    ax_loss.plot([r["step"] for r in train], [r["loss"] for r in train], lw=0.8, label="train loss")
    if val:
        ax_loss.plot(
            [r["step"] for r in val], [r["val_loss"] for r in val], "o-", ms=3, label="validation loss"
        )
    ax_lr.plot([r["step"] for r in train], [r["lr"] for r in train], color="tab:green", lw=1.0)
    for i, (name, first, last) in enumerate(phase_boundaries(records)):
        for ax in (ax_loss, ax_lr):
            if i:
                ax.axvline(first - 0.5, color="grey", ls="--", lw=0.8)
        ax_loss.text(
            (first + last) / 2,
            1.01,
            name,
            transform=ax_loss.get_xaxis_transform(),
            ha="center",
            va="bottom",
            fontsize=9,
        )
    ax_loss.set_ylabel("loss (nats/token)")
    ax_loss.legend(loc="upper right")
    ax_loss.grid(alpha=0.3)
    ax_lr.set_ylabel("learning rate")
    ax_lr.set_xlabel("optimizer step")
    ax_lr.ticklabel_format(axis="y", style="sci", scilimits=(0, 0))
    ax_lr.grid(alpha=0.3)
    fig.tight_layout()
    out = Path(out_png)
    tmp = out.with_name(f".{out.name}.render.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    write_atomic(out, tmp.read_bytes())
    tmp.unlink()
    return out
