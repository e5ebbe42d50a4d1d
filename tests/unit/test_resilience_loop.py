"""The training loop's resilience, fast: the real Trainer, CheckpointManager, guards and events log
around a stand-in step (one real MindSpore Parameter; its loss is a function of the data index, so
a poisoned window of data makes a spike exactly where the test puts it). The real model under the
real CLI is in test_resilience_e2e.py (slow)."""
import json
import math
import re

import numpy as np
import pretrain_faults
import pytest

from pretrain.config.errors import PretrainRunError
from pretrain.resilience.checkpoint import read_state
from pretrain.resilience.events import read_events
from pretrain.resilience.resume import config_changes
from pretrain.resilience.skips import add_window, data_index
from pretrain.resilience.spike import SpikeGuard
from pretrain.train.metrics import MetricsWriter
from pretrain.train.loop import train_phases
from pretrain.train.trainer import Trainer

from tests.helpers.toy_trainer import ToyStep, make_trainer, phase_inputs


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MindSpore may write dumps into the CWD


def kinds(tmp_path, *names):
    return [e for e in read_events(tmp_path / "events.jsonl") if e["kind"] in names]


def train_records(tmp_path):
    return [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()
            if '"train"' in line]


def test_a_spike_rolls_back_before_it_skips_its_data_and_a_resume_replays_the_same_stream(tmp_path):
    # Data 9..11 are poisoned: steps 10, 11, 12 (phase steps 9..11) are the spike, confirmed at 12.
    trainer, checkpoints, _ = make_trainer(tmp_path, poison={9, 10, 11})
    train_phases(trainer, [phase_inputs(20)])
    trainer.metrics.close()

    spike, = kinds(tmp_path, "spike")
    assert (spike["step"], spike["first_step"]) == (12, 10)
    rollback, = kinds(tmp_path, "rollback")
    # The newest checkpoint before step 9 (the update before the first high loss): step 6; the
    # checkpoint of step 9 (its loss was normal, its update may have broken the model) is discarded.
    assert (rollback["step"], rollback["to_step"]) == (12, 6)
    assert [e["step"] for e in kinds(tmp_path, "prune") if e["reason"] == "rollback"] == [9]
    skip, = kinds(tmp_path, "skip")
    assert skip["what"] == "data" and skip["data"] == [8, 11] and skip["steps"] == [9, 12]

    records = train_records(tmp_path)
    assert [r["step"] for r in records] == list(range(1, 21))  # the rolled-back steps were cut
    assert [r["data_index"] for r in records] == list(range(8)) + list(range(12, 24))
    assert max(r["loss"] for r in records) <= 5.0  # no poisoned loss left in the run's history
    assert trainer.step.updates == 20  # every kept step updated once: rolled-back updates are gone
    assert trainer.state.data_skips == {"general": [[8, 11]]}

    # The rollback re-saved step 6 with the skipped window, so a crash right after it resumes into
    # the same stream instead of into the spike again.
    resaved = checkpoints.latest(before_step=7)
    assert resaved.step == 6 and read_state(resaved)["data_skips"] == {"general": [[8, 11]]}
    again, _, _ = make_trainer(tmp_path / "again", poison={9, 10, 11})
    again.restore(checkpoints, resaved)
    train_phases(again, [phase_inputs(20)])
    again.metrics.close()
    replay = train_records(tmp_path / "again")
    assert [(r["step"], r["data_index"], r["loss"]) for r in replay] == [
        (r["step"], r["data_index"], r["loss"]) for r in records[6:]]
    assert not kinds(tmp_path / "again", "spike")


def test_a_spike_that_comes_back_stops_the_run_past_max_rollbacks(tmp_path):
    trainer, _, _ = make_trainer(tmp_path, poison=set(range(8, 100)), max_rollbacks=2)
    with pytest.raises(PretrainRunError, match=r"limit at step \d+: .*; 3 rollbacks .*max_rollbacks=2"):
        train_phases(trainer, [phase_inputs(40)])
    assert len(kinds(tmp_path, "rollback")) == 2 and len(kinds(tmp_path, "spike")) == 3
    error, = kinds(tmp_path, "error")
    assert "rollback limit" in error["reason"]


def test_an_early_spike_inside_the_warmup_rolls_back_and_skips_its_data(tmp_path, capsys):
    """Issue 40: a spike in the window's 20-step warm-up went unseen and the window learned it."""
    trainer, _, _ = make_trainer(tmp_path, poison={4, 5, 6}, warmup=20)
    train_phases(trainer, [phase_inputs(20)])
    trainer.metrics.close()
    said = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("loss spike")]
    assert len(said) == 1 and re.fullmatch(   # the operator sees it, not only events.jsonl
        r"loss spike at step 7: loss [\d.]+ > [\d.]+ \(the phase's best [\d.]+ \+ resilience\.spike_best_margin=2\) "
        r"since step 5; rolled back to step 3, skipping general's data 3-6", said[0]), said
    spike, = kinds(tmp_path, "spike")
    assert (spike["first_step"], spike["step"], spike["rule"]) == (5, 7, "best")
    assert spike["threshold"] == pytest.approx(7.0, abs=0.05)         # the best level ~5.0 + 2 nats
    rollback, = kinds(tmp_path, "rollback")
    assert rollback["to_step"] == 3                                    # before step 4's update
    skip, = [e for e in kinds(tmp_path, "skip") if e["what"] == "data"]
    assert skip["data"] == [3, 6]
    # the save due at step 6 (a suspect loss) waited: retention could have dropped checkpoint 3 for it
    assert [e["step"] for e in kinds(tmp_path, "save")][:4] == [3, 3, 6, 9]
    records = train_records(tmp_path)
    assert [r["step"] for r in records] == list(range(1, 21)) and max(r["loss"] for r in records) <= 5.0


def test_an_early_divergence_that_keeps_coming_back_stops_in_one_line_naming_step_loss_and_keys(tmp_path):
    trainer, _, _ = make_trainer(tmp_path, poison=set(range(4, 100)), max_rollbacks=1, warmup=20)
    with pytest.raises(PretrainRunError) as stop:
        train_phases(trainer, [phase_inputs(40)])
    line = str(stop.value)
    assert "\n" not in line
    assert re.match(r"loss spike rollback limit at step \d+: loss 14\.9\d* > 6\.9\d* \(the phase's best "
                    r"4\.9\d* \+ resilience\.spike_best_margin=2\) since step \d+; 2 rollbacks", line)
    for key in ("train.lr_peak", "resilience.max_rollbacks=1", "raise resilience.max_rollbacks"):
        assert key in line
    assert len(kinds(tmp_path, "rollback")) == 1 and len(kinds(tmp_path, "spike")) == 2
    error, = kinds(tmp_path, "error")
    assert error["reason"] == line


def test_a_spike_with_no_checkpoint_before_it_is_a_clear_error(tmp_path):
    trainer, _, _ = make_trainer(tmp_path, poison={5, 6, 7}, save_every=100)
    with pytest.raises(PretrainRunError, match=r"no checkpoint from before step 5 to roll back to"):
        train_phases(trainer, [phase_inputs(20)])


def test_nonfinite_steps_skip_the_update_are_logged_and_too_many_in_a_row_stop_the_run(tmp_path):
    trainer, checkpoints, _ = make_trainer(tmp_path)
    train_phases(trainer, [phase_inputs(12, nan={3, 4})])
    assert [(e["step"], e["what"], e["in_a_row"]) for e in kinds(tmp_path, "skip")] == [
        (4, "update", 1), (5, "update", 2)]
    assert trainer.step.updates == 10  # 12 steps, 2 of them skipped
    assert math.isnan(train_records(tmp_path)[3]["loss"]) and not train_records(tmp_path)[3]["finite"]
    assert not kinds(tmp_path, "spike")  # NaN losses are not spikes

    stuck, _, _ = make_trainer(tmp_path / "stuck", max_nonfinite=3)
    with pytest.raises(PretrainRunError, match=r"4 steps in a row \(up to step 8\) had a non-finite"):
        train_phases(stuck, [phase_inputs(20, nan=set(range(4, 20)))])
    assert stuck.step.updates == 4


class StopAt:
    """GracefulStop as the loop sees it: `requested` turns True once the trainer reaches `step`."""

    signal_name = "SIGTERM"

    def __init__(self, trainer, step):
        self.trainer, self.step = trainer, step

    @property
    def requested(self):
        return self.trainer.state.global_step >= self.step


def test_a_stop_request_checkpoints_the_finished_step_and_the_resume_continues_after_it(tmp_path):
    trainer, checkpoints, _ = make_trainer(tmp_path)
    trainer.keeper.stop = StopAt(trainer, 5)
    results = train_phases(trainer, [phase_inputs(8, "general"), phase_inputs(4, "reasoning")])
    assert trainer.keeper.stopped == "SIGTERM" and [r["stopped"] for r in results] == [True]
    signal, = kinds(tmp_path, "signal")
    assert (signal["signal"], signal["step"]) == ("SIGTERM", 5)
    newest = checkpoints.latest()
    assert newest.step == 5 and read_state(newest)["phase_step"] == 5

    resumed, _, _ = make_trainer(tmp_path)
    resumed.restore(checkpoints, checkpoints.latest())
    results = train_phases(resumed, [phase_inputs(8, "general"), phase_inputs(4, "reasoning")])
    assert [r["phase"] for r in results] == ["general", "reasoning"] and results[0]["first_step"] == 6
    assert resumed.state.global_step == 12 and resumed.step.updates == 12
    assert [r["step"] for r in train_records(tmp_path)] == list(range(1, 13))
    # a finished run started again has nothing left to train
    done, _, _ = make_trainer(tmp_path)
    done.restore(checkpoints, checkpoints.latest())
    assert train_phases(done, [phase_inputs(8, "general"), phase_inputs(4, "reasoning")]) == []


def test_a_resumed_phase_summarises_the_whole_phase_from_its_first_step(tmp_path, capsys):
    """Issue 27: after a resume, `loss first` was the resumed segment's while `steps` counted the
    whole phase. The phase's first losses ride in the checkpoint (TrainState.phase_losses)."""
    trainer, checkpoints, _ = make_trainer(tmp_path, save_every=100)
    trainer.keeper.stop = StopAt(trainer, 5)
    (stopped,) = train_phases(trainer, [phase_inputs(8, "general"), phase_inputs(4, "reasoning")])
    resumed, _, _ = make_trainer(tmp_path)
    resumed.restore(checkpoints, checkpoints.latest())
    capsys.readouterr()
    general, _ = train_phases(resumed, [phase_inputs(8, "general"), phase_inputs(4, "reasoning")])
    assert general["steps"] == 8 and general["first_step"] == 6 and general["resumed"]
    assert general["loss_first"] == stopped["loss_first"] == 5.0           # step 1's, not step 6's (4.95)
    assert general["loss_start_mean"] == stopped["loss_start_mean"]
    assert "phase general done: steps 1-8 (resumed at 6), loss 5.000 -> " in capsys.readouterr().out


def test_a_rank_that_does_not_save_rolls_back_too_and_never_touches_the_checkpoints(tmp_path):
    writer, checkpoints, _ = make_trainer(tmp_path)
    train_phases(writer, [phase_inputs(6)])  # the saving rank: checkpoint 3 and general's final, 6
    reader = Trainer(ToyStep({8, 9, 10}), metrics=MetricsWriter(tmp_path, enabled=False),
                     throughput=writer.throughput, grad_accum=1, arch={"toy": 1},
                     checkpoints=checkpoints, save_every_steps=3, writes_run_files=False,
                     spike=SpikeGuard(ratio=2.0, consecutive=3, window=5, warmup_steps=3))
    reader.restore(checkpoints, checkpoints.latest())
    before = sorted(info.path.name for info in checkpoints.list())
    # reasoning's data 8..10 spike at global steps 15..17; the newest checkpoint before step 14 is
    # general's final one: the rollback restarts reasoning from its first step, skipping data 7..10
    train_phases(reader, [phase_inputs(6, "general"), phase_inputs(20, "reasoning")])
    assert sorted(info.path.name for info in checkpoints.list()) == before
    assert reader.state.data_skips == {"reasoning": [[7, 10]]}
    assert reader.state.global_step == 26 and reader.step.updates == 26


def test_config_changes_lists_the_dotted_keys_that_differ():
    saved = {"train": {"lr": 1.0, "save_every_steps": 3}, "model": {"h": 64}, "gone": 1}
    now = {"train": {"lr": 1.0, "save_every_steps": 5}, "model": {"h": 64}, "new": {"x": 2}}
    assert config_changes(saved, now) == ["gone", "new.x", "train.save_every_steps"]
    assert config_changes(now, now) == [] and config_changes(None, now) == []


def test_data_index_jumps_over_merged_skip_windows():
    windows = add_window([], 2, 3)
    assert [data_index(k, windows) for k in range(5)] == [0, 1, 4, 5, 6]
    windows = add_window(windows, 6, 6)
    assert windows == [[2, 3], [6, 6]]
    assert [data_index(k, windows) for k in range(6)] == [0, 1, 4, 5, 7, 8]
    assert add_window(windows, 4, 5) == [[2, 6]]  # adjacent and overlapping windows merge
    assert add_window([[2, 6]], 0, 9) == [[0, 9]]
    with pytest.raises(ValueError):
        add_window([], 3, 2)


def test_the_test_faults_poison_a_step_and_multiply_the_lr_of_data_indices_and_name_unknown_ones():
    f = pretrain_faults.Faults({"nan_grads": [3], "lr_mult": {"data": [5, 6], "factor": 10}})
    micro = [{"loss_mask": np.ones((2, 2), np.float32)}]
    assert f.micro_batches(2, micro) is micro and np.isnan(f.micro_batches(3, micro)[0]["loss_mask"]).all()
    assert [f.lr("general", i, 1.0) for i in (4, 5, 6, 7)] == [1.0, 10.0, 10.0, 1.0]
    with pytest.raises(ValueError, match=r"unknown faults \['typo'\]"):
        pretrain_faults.Faults({"typo": 1})
