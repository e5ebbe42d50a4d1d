"""The loss is the mean over the valid tokens of the whole global batch: data parallel over two
msrun processes (each rank 2 micro-batches of 1 row, with very uneven valid-token counts) trains
exactly what one process trains on the global batch at once."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tests.helpers.net import free_port
from tests.helpers.repo import REPO

pytestmark = pytest.mark.slow   # three processes compile the model graph (~1-2 min on 2 cores)

WORKER = REPO / "tests" / "helpers" / "dp_equivalence_worker.py"
ROOT = WORKER.parent.parent


def run(cmd, cwd):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")  # msrun runs `python`
    proc = subprocess.run(cmd, check=False, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    logs = "".join(p.read_text()[-3000:] for p in sorted(Path(cwd).glob("logs/*.log")))
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}\n{logs}"


def test_dp2_with_uneven_tokens_equals_one_process_on_the_global_batch(tmp_path):
    run([sys.executable, str(WORKER), str(tmp_path), "single"], tmp_path)
    run(["msrun", "--worker_num=2", "--local_worker_num=2", f"--master_port={free_port()}", "--join=True",
         f"--log_dir={tmp_path / 'logs'}", "--cluster_time_out=300",
         "python", str(WORKER), str(tmp_path), "dp2"], tmp_path)
    single = np.load(tmp_path / "single_rank0.npz")
    ranks = [np.load(tmp_path / f"dp2_rank{r}.npz") for r in (0, 1)]
    # rank 0's rows hold 4 + 5 valid tokens, rank 1's 30 + 32: per-rank means would weigh 9 like 62
    assert list(single["tokens"]) == list(ranks[0]["tokens"]) == list(ranks[1]["tokens"]) == [71, 71]
    for r in ranks:
        np.testing.assert_allclose(r["losses"], single["losses"], rtol=1e-5)
        np.testing.assert_allclose(r["grad_norms"], single["grad_norms"], rtol=1e-5)
        weights = [k for k in single.files if k.startswith("w:")]
        assert weights and sorted(weights) == sorted(k for k in r.files if k.startswith("w:"))
        for k in weights:
            # AdamW moves every weight by up to lr = 1e-2 a step whatever its gradient's size, so a
            # near-zero gradient turns summation-order rounding into a visible step: 1% of one step
            np.testing.assert_allclose(r[k], single[k], rtol=0, atol=1e-4)
    assert not np.allclose(single["losses"][0], single["losses"][1])  # it trained: step 2 differs
