"""The training loop's resilience, fast: the real Trainer, CheckpointManager, guards and events log
around a stand-in step (one real MindSpore Parameter; its loss is a function of the data index, so
a poisoned window of data makes a spike exactly where the test puts it). The real model under the
real CLI is in test_resilience_e2e.py (slow)."""
import json

import numpy as np
import pytest

from pretrain.config.errors import PretrainRunError
from pretrain.resilience.checkpoint import CheckpointManager
from pretrain.resilience.resume import find_start
from pretrain.train.metrics import MetricsWriter
from pretrain.resilience.identity import final_tag
from pretrain.train.loop import train_phases

from tests.helpers.toy_trainer import make_trainer, phase_inputs


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MindSpore may write dumps into the CWD


def test_an_async_save_is_not_called_saved_before_it_is_written(tmp_path, monkeypatch, capsys):
    """Issue 27: with resilience.async_save, "saved step N" was printed before that save failed."""
    import mindspore as ms
    trainer, checkpoints, _ = make_trainer(tmp_path, save_every=3, async_save=True)

    def disk_full(save_obj, path, **kwargs):
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(ms, "save_checkpoint", disk_full)
    with pytest.raises(PretrainRunError, match="No space left on device"):
        train_phases(trainer, [phase_inputs(8)])
    out = capsys.readouterr().out
    assert "saving step 3 in the background" in out and "saved step" not in out
    assert checkpoints.latest() is None


def test_find_start_resumes_own_progress_hands_off_a_finished_previous_phase_or_says_why_not(tmp_path):
    from mindspore import Parameter, Tensor, nn

    class Cell(nn.Cell):
        def __init__(self):
            super().__init__()
            self.w = Parameter(Tensor(np.zeros(1, np.float32)), name="w")

    cell, ckpt = Cell(), CheckpointManager(tmp_path / "ckpt", keep_latest=5)
    assert find_start(["general", "reasoning", "anneal"], None, ckpt) is None
    with pytest.raises(PretrainRunError, match=r"run phase=general first with the same run_dir"):
        find_start(["reasoning"], "general", ckpt)

    ckpt.save(3, cell, {"phase": "general", "phase_step": 3, "phases_done": []})
    start = find_start(["general", "reasoning", "anneal"], None, ckpt)
    assert start.info.step == 3 and not start.handoff
    with pytest.raises(PretrainRunError, match=r"step_00000003, in the middle of general: run phase=general"):
        find_start(["reasoning"], "general", ckpt)

    ckpt.save(5, cell, {"phase": "general", "phase_step": 5, "phases_done": ["general"]},
              tag=final_tag("general"))
    start = find_start(["reasoning"], "general", ckpt)
    assert start.handoff and start.info.tag == "phase-general-final"
    with pytest.raises(PretrainRunError, match=r"checkpoints of phase general .* does not train"):
        find_start(["anneal"], "reasoning", ckpt)

    ckpt.save(7, cell, {"phase": "reasoning", "phase_step": 2, "phases_done": ["general"]})
    start = find_start(["reasoning"], "general", ckpt)
    assert start.info.step == 7 and not start.handoff  # the phase's own progress wins


def test_metrics_rewind_cuts_later_records_and_a_torn_line(tmp_path):
    metrics = MetricsWriter(tmp_path)
    for step in range(1, 6):
        metrics.log({"kind": "train", "step": step, "loss": float(step)})
    metrics.log({"kind": "val", "step": 5, "val_loss": 1.0})
    with open(tmp_path / "metrics.jsonl", "a") as fh:
        fh.write('{"kind": "train", "st')  # a kill -9 mid-write
    metrics.rewind(3)
    metrics.log({"kind": "train", "step": 4, "loss": 40.0})
    metrics.close()
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["loss"]) for r in lines] == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 40.0)]
