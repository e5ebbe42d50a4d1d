"""Our loop vs MindFormers' trainer (train.engine=mindformers) on the same config, one after the other.

    python -m pretrain.bench.engine [hydra overrides ...]

Each engine trains the config's phases with `python -m pretrain` in its own scratch run dir (same
data cache); the figure is the median tokens/s over the steps after the first (graph compilation),
from our metrics.jsonl (per-step tokens_per_s) and the MindFormers engine's losses.jsonl (step
timestamps). Default config: phase=general of the tiny model shrunk to 0.6M parameters at seq 64.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from pretrain.config.shrunken import SMALL_MODEL

SMALL = [
    "phase=general",
    *SMALL_MODEL,
    "train.eval_every=0",
    "train.total_tokens=30000",
]


def _train(engine: str, overrides, scratch: Path) -> Path:
    run = scratch / engine
    subprocess.run(
        [sys.executable, "-m", "pretrain", *overrides, f"train.engine={engine}", f"run_dir={run}"],
        check=True,
        cwd=scratch,
        stdout=subprocess.DEVNULL,
        env=dict(os.environ),
    )
    return run


def ours(run: Path) -> float:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return statistics.median(r["tokens_per_s"] for r in rows if r.get("kind") == "train" and r["step"] > 1)


def mindformers(run: Path, tokens_per_step: int) -> float:
    rows = [
        json.loads(x)
        for p in sorted((run / "mindformers").glob("*/losses.jsonl"))
        for x in p.read_text().splitlines()
        if x.strip()
    ]
    gaps = [b["time"] - a["time"] for a, b in zip(rows, rows[1:]) if b["step"] == a["step"] + 1]
    return tokens_per_step / statistics.median(gaps)


def main(argv) -> None:
    overrides = argv or SMALL
    from pretrain.config.compose import compose

    cfg = compose(overrides)
    per_step = int(cfg.train.global_batch_size) * int(cfg.model.seq_length)
    scratch = Path(tempfile.mkdtemp(prefix="bench-engine-"))
    a = ours(_train("pretrain", overrides, scratch))
    b = mindformers(_train("mindformers", overrides, scratch), per_step)
    print(
        f"cores {os.cpu_count()} | tokens/s (median step after compile): pretrain {a:.0f} | "
        f"mindformers {b:.0f} | mindformers/pretrain {b / a:.2f}"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
