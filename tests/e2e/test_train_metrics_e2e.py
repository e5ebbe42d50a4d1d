"""Metrics sinks (JSONL, TensorBoard events, progress bar) and the loss/LR curve (no mindspore)."""
import os
import subprocess
import sys

import pytest

from tests.helpers.repo import REPO


@pytest.mark.slow   # a process importing mindspore: 8 s under load, to keep the default suite within 5 minutes
def test_tensorboard_before_mindspore_leaves_mindspore_importable(tmp_path):
    # tensorboardX loads protobuf; MindSpore's generated modules then need its pure-Python backend
    code = (
        f"from pretrain.train.metrics import MetricsWriter; MetricsWriter({str(tmp_path)!r}).close(); "
        "import mindspore"
    )
    repo = str(REPO)
    env = {k: v for k, v in os.environ.items() if k != "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": repo},
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
