"""Issue 12 item 1: every checkpoint unusable -> never a silent fresh start; unusable checkpoints are
quarantined, never pruned and never counted toward keep_checkpoint_max. Fake checkpoints (no
MindSpore): verification reads only the manifest and the files' bytes."""
import pytest
from tests.helpers.rundir_fakes import corrupt, fake_checkpoint

from pretrain.config.errors import PretrainRunError
from pretrain.resilience.checkpoint import QUARANTINE, CheckpointManager, verify
from pretrain.resilience.events import EventLog, read_events


def manager(directory, events_path, **kw):
    return CheckpointManager(directory, keep_latest=kw.pop("keep_latest", 2),
                             events=EventLog(events_path), **kw)


def kinds(path, kind):
    return [e for e in read_events(path) if e["kind"] == kind]


def test_every_checkpoint_unusable_is_refused_in_one_line_naming_each_and_quarantined(tmp_path):
    ckpt, events = tmp_path / "ckpt", tmp_path / "events.jsonl"
    old, new = fake_checkpoint(ckpt, 3), fake_checkpoint(ckpt, 6)
    corrupt(old)
    (new / "manifest.json").unlink()
    with pytest.raises(PretrainRunError) as err:
        manager(ckpt, events).latest()
    message = str(err.value)
    assert "\n" not in message and "nothing was started" in message
    assert "step_00000006 (manifest.json missing)" in message
    assert "step_00000003 (weights.safetensors sha256 differs" in message
    assert "resilience.start_fresh=true" in message
    # moved aside, bytes intact, with the reason beside them; no step_* left for a run to prune
    assert sorted(p.name for p in (ckpt / QUARANTINE).iterdir()) == [
        "step_00000003", "step_00000003.reason", "step_00000006", "step_00000006.reason"]
    assert not list(ckpt.glob("step_*"))
    assert [e["step"] for e in kinds(events, "quarantine")] == [6, 3]
    assert not kinds(events, "fallback")   # nothing was fallen back to


def test_a_second_start_over_quarantined_checkpoints_is_still_refused_until_start_fresh(tmp_path):
    ckpt, events = tmp_path / "ckpt", tmp_path / "events.jsonl"
    corrupt(fake_checkpoint(ckpt, 3))
    with pytest.raises(PretrainRunError):
        manager(ckpt, events).latest()
    # the next start sees an empty step_* namespace: still not a silent fresh start
    with pytest.raises(PretrainRunError, match=r"step_00000003 \(weights.safetensors sha256 differs"):
        manager(ckpt, events).latest()
    assert manager(ckpt, events, start_fresh=True).latest() is None
    assert (ckpt / QUARANTINE / "step_00000003").is_dir()   # start_fresh keeps them


def test_an_empty_directory_still_starts_fresh(tmp_path):
    assert manager(tmp_path / "ckpt", tmp_path / "events.jsonl").latest() is None


def test_bad_newer_checkpoints_are_quarantined_and_not_counted_by_retention(tmp_path):
    ckpt, events = tmp_path / "ckpt", tmp_path / "events.jsonl"
    good = [fake_checkpoint(ckpt, 3), fake_checkpoint(ckpt, 6)]
    corrupt(fake_checkpoint(ckpt, 9))
    mgr = manager(ckpt, events, keep_latest=2)
    info = mgr.latest()
    assert info.step == 6 and info.verified
    fallback, = kinds(events, "fallback")
    quarantine, = kinds(events, "quarantine")
    assert fallback["step"] == quarantine["step"] == 9 and "sha256" in quarantine["reason"]
    mgr._prune()   # what every save runs: the bad step 9 no longer takes one of the 2 places
    assert [i.step for i in mgr.list()] == [6, 3] and all(verify(p) is None for p in good)
    assert (ckpt / QUARANTINE / "step_00000009").is_dir() and not kinds(events, "prune")


def test_the_same_step_quarantined_twice_keeps_both(tmp_path):
    ckpt, events = tmp_path / "ckpt", tmp_path / "events.jsonl"
    fake_checkpoint(ckpt, 3)
    for _ in range(2):
        corrupt(fake_checkpoint(ckpt, 6))
        assert manager(ckpt, events).latest().step == 3
    assert sorted(p.name for p in (ckpt / QUARANTINE).iterdir() if p.is_dir()) == [
        "step_00000006", "step_00000006.1"]


def test_a_rank_that_does_not_own_the_directory_skips_but_never_moves(tmp_path):
    ckpt = tmp_path / "ckpt"
    fake_checkpoint(ckpt, 3)
    corrupt(fake_checkpoint(ckpt, 6))
    assert CheckpointManager(ckpt, keep_latest=2, writes_run_files=False).latest().step == 3
    assert (ckpt / "step_00000006").is_dir() and not (ckpt / QUARANTINE).exists()
