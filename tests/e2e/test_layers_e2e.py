"""Imports only point down the layer order (pretrain/tools/imports.py), and a rank reads its frozen
config without Hydra."""
import json
import os
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from tests.helpers.repo import REPO


@pytest.mark.slow   # reads every module's source in a process: 8 s under load, to keep the default suite within 5 minutes
def test_the_command_prints_the_graph_and_exits_zero():
    proc = subprocess.run([sys.executable, "-m", "pretrain.tools.imports"], cwd=REPO, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 import(s) against the layer order" in proc.stdout and "0 import circle(s)" in proc.stdout
    assert any(line.startswith("train") and "resilience(" in line for line in proc.stdout.splitlines())


def test_a_rank_reads_the_frozen_config_without_hydra(compose_many, tmp_path):
    """What pretrain.worker does before it trains: load config.yaml, pick the engine, check the rules,
    import the loop. Hydra (and mindspore) stay out of the process until the model is built."""
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(compose_many([]), resolve=True))
    probe = (
        "import sys, json\n"
        "from pathlib import Path\n"
        "from pretrain import worker\n"
        "from pretrain.config import validate\n"
        "from pretrain.config.layout import engine_of\n"
        f"cfg = worker.load_frozen(Path({str(tmp_path)!r}))\n"
        "validate.check(cfg); validate.check_trainable(cfg)\n"
        "import pretrain.engine, pretrain.engine.mindformers, pretrain.train.loop\n"
        "print(json.dumps({'engine': engine_of(cfg), 'loaded': sorted({m.split('.')[0] for m in "
        "sys.modules if m.split('.')[0] in ('hydra', 'mindspore', 'mindformers')})}))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"engine": "pretrain", "loaded": []}
