"""CheckpointManager with real MindSpore: a small Cell trained by nn.AdamWeightDecay, saved as
safetensors, verified by the manifest, loaded back. Crashes and disk failures are real where
that is cheap (SIGKILL of a saving process, RLIMIT_FSIZE refusing writes)."""
import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from pretrain.config.errors import PretrainRunError
from pretrain.resilience.checkpoint import MANIFEST, STATE, WEIGHTS, CheckpointManager, verify
from pretrain.resilience.events import EventLog, read_events
from tests.helpers.repo import REPO



@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)   # MindSpore writes rank_0/ dumps into the CWD on graph errors


def make_model(seed=0, width=8, depth=2):
    """Dense stack + AdamWeightDecay + a jitted step; the optimizer Cell holds weights, moments,
    global_step and learning_rate: the Cell a checkpoint saves."""
    import mindspore as ms
    from mindspore import nn

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.layers = nn.CellList([nn.Dense(4 if i == 0 else width, width) for i in range(depth)])
            self.head = nn.Dense(width, 1)

        def construct(self, x, y):
            for layer in self.layers:
                x = ms.ops.tanh(layer(x))
            return ((self.head(x) - y) ** 2).mean()

    ms.set_seed(seed)
    net = Net()
    opt = nn.AdamWeightDecay(net.trainable_params(), learning_rate=1e-2, weight_decay=0.1)

    def forward(x, y):
        return net(x, y)

    grad_fn = ms.value_and_grad(forward, None, opt.parameters)

    @ms.jit
    def step(x, y):
        loss, grads = grad_fn(x, y)
        opt(grads)
        return loss

    return net, opt, step


def batches(n, seed=1):
    from mindspore import Tensor
    rng = np.random.default_rng(seed)
    def sample(*shape):
        return Tensor(rng.normal(size=shape).astype(np.float32))
    return [(sample(16, 4), sample(16, 1)) for _ in range(n)]


def values(cell):
    return {p.name: p.asnumpy().copy() for p in cell.get_parameters()}


def pointer(directory):
    return (Path(directory) / "latest").read_text().strip()


def kinds(events_path, kind):
    return [e for e in read_events(events_path) if e["kind"] == kind]


@pytest.mark.parametrize("async_save", [False, True], ids=["sync", "async"])
def test_round_trip_restores_weights_moments_and_continues_bitwise(tmp_path, monkeypatch, async_save):
    import threading
    import mindspore as ms
    data = batches(5)
    training_went_on = threading.Event()
    if async_save:
        # Hold the writer thread until the loop has taken more steps, so the test fails if the
        # async snapshot shares memory with the live parameters.
        real_save = ms.save_checkpoint

        def save_after_training(*args, **kwargs):
            assert training_went_on.wait(60)
            real_save(*args, **kwargs)
        monkeypatch.setattr(ms, "save_checkpoint", save_after_training)
    net, opt, step = make_model()
    for x, y in data[:2]:
        step(x, y)
    saved = values(opt)
    events = EventLog(tmp_path / "events.jsonl")
    mgr = CheckpointManager(tmp_path / "ckpt", keep_latest=2, events=events, config_hash="abc",
                            async_save=async_save)
    state = {"phase": "general", "phase_step": 2, "data_position": [0, 32], "rng": [1, 2, 3]}
    path = mgr.save(2, opt, state)
    # Training goes on while an async write may still run: the checkpoint must hold step-2 values.
    reference = [float(step(x, y).asnumpy()) for x, y in data[2:]]
    training_went_on.set()
    mgr.wait()
    assert path.name == "step_00000002" and pointer(mgr.directory) == "step_00000002"
    assert not [p for p in mgr.directory.iterdir() if p.name.startswith(".")]
    manifest = json.loads((path / MANIFEST).read_text())
    assert set(manifest["files"]) == {WEIGHTS, STATE} and manifest["config_hash"] == "abc"
    assert verify(path) is None

    net2, opt2, step2 = make_model(seed=7)          # different init: loading must overwrite all of it
    info = mgr.latest()
    assert info.step == 2 and info.verified
    assert mgr.load(info, opt2) == state
    loaded = values(opt2)
    assert set(loaded) == set(saved) and any(name.startswith("adam_m.") for name in saved)
    for name in saved:
        np.testing.assert_array_equal(loaded[name], saved[name], err_msg=name)
    assert [float(step2(x, y).asnumpy()) for x, y in data[2:]] == reference
    save_event, = kinds(tmp_path / "events.jsonl", "save")
    assert save_event["step"] == 2 and save_event["async_save"] is async_save and save_event["stall_s"] >= 0


def test_retention_keeps_newest_k_untagged_and_every_tagged(tmp_path):
    _, opt, _ = make_model()
    mgr = CheckpointManager(tmp_path, keep_latest=2, events=EventLog(tmp_path / "events.jsonl"))
    for step in range(1, 6):
        mgr.save(step, opt, {"step": step}, tag="phase-general-final" if step == 2 else None)
    names = [info.path.name for info in mgr.list()]
    assert names == ["step_00000005", "step_00000004", "step_00000002-phase-general-final"]
    assert mgr.latest(tag="phase-general-final").step == 2
    assert mgr.latest().step == 5
    assert sorted(e["step"] for e in kinds(tmp_path / "events.jsonl", "prune")) == [1, 3]


def test_leftover_tmp_dir_is_ignored_then_cleaned(tmp_path):
    _, opt, _ = make_model()
    events = tmp_path / "events.jsonl"
    mgr = CheckpointManager(tmp_path / "ckpt", keep_latest=3, events=EventLog(events))
    mgr.save(1, opt, {"step": 1})
    crashed = mgr.directory / ".tmp-step_00000002-99999"     # what kill -9 mid-save leaves
    crashed.mkdir()
    (crashed / WEIGHTS).write_bytes(b"\0" * 100)
    assert [i.step for i in mgr.list()] == [1] and mgr.latest().step == 1
    mgr.save(2, opt, {"step": 2})
    assert not crashed.exists() and [i.step for i in mgr.list()] == [2, 1]
    assert any(e["reason"].startswith("leftover") for e in kinds(events, "prune"))


SAVE_FOREVER = textwrap.dedent("""
    import sys, itertools
    sys.path.insert(0, {repo!r})
    import numpy as np, mindspore as ms
    from mindspore import nn
    from pretrain.resilience.checkpoint import CheckpointManager
    net = nn.SequentialCell([nn.Dense(512, 512) for _ in range(8)])   # 2.1M params, 25 MB with Adam moments
    opt = nn.AdamWeightDecay(net.trainable_params())
    mgr = CheckpointManager({directory!r}, keep_latest=2)
    for step in itertools.count(1):
        mgr.save(step, opt, {{"step": step}})
""")


def test_kill_9_while_saving_leaves_a_verified_checkpoint(tmp_path):
    directory = tmp_path / "ckpt"
    script = SAVE_FOREVER.format(repo=str(REPO), directory=str(directory))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            names = os.listdir(directory) if directory.exists() else []
            # Kill the moment a save is in flight, once at least one has completed.
            if any(n.startswith("step_") for n in names) and any(n.startswith(".tmp-") for n in names):
                os.kill(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.002)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()[-2000:]
    assert any(n.startswith(".tmp-") for n in os.listdir(directory)), "the kill did not land mid-save"
    mgr = CheckpointManager(directory, keep_latest=2)
    published = mgr.list()
    # Every published dir is complete (no fallback needed): the kill can only ever hit a .tmp dir.
    assert published and all(verify(info.path) is None for info in published)
    info = mgr.latest()
    assert info.step == published[0].step and pointer(directory) == info.path.name
    assert json.loads((info.path / STATE).read_text()) == {"step": info.step}


@pytest.mark.parametrize("damage, reason", [
    ("flip_weights", "sha256"), ("truncate_weights", "bytes"), ("delete_manifest", "manifest.json missing"),
    ("flip_state", "sha256"), ("garble_manifest", "unreadable"),
])
def test_corrupt_newest_falls_back_to_previous(tmp_path, damage, reason):
    _, opt, _ = make_model()
    events = tmp_path / "events.jsonl"
    mgr = CheckpointManager(tmp_path / "ckpt", keep_latest=3, events=EventLog(events))
    mgr.save(1, opt, {"step": 1})
    newest = mgr.save(2, opt, {"step": 2})
    name, how = {"flip_weights": (WEIGHTS, "flip"), "truncate_weights": (WEIGHTS, "truncate"),
                 "delete_manifest": (MANIFEST, "delete"), "flip_state": (STATE, "flip"),
                 "garble_manifest": (MANIFEST, "truncate")}[damage]
    target = newest / name
    os.chmod(target, 0o644)        # MindSpore saves weights read-only
    blob = bytearray(target.read_bytes())
    if how == "flip":
        blob[len(blob) // 2] ^= 0x01
        target.write_bytes(bytes(blob))
    elif how == "truncate":
        target.write_bytes(bytes(blob[: len(blob) // 2]))
    else:
        target.unlink()
    info = mgr.latest()
    assert info.step == 1 and info.verified
    fallback, = kinds(events, "fallback")
    assert fallback["step"] == 2 and reason in fallback["reason"]
    _, opt2, _ = make_model(seed=3)
    assert mgr.load(info, opt2) == {"step": 1}
    mgr.save(2, opt, {"step": 2, "again": True})      # the same step written again replaces the broken one
    assert mgr.latest().step == 2 and verify(newest) is None


def assert_failed_save_left_previous_intact(mgr, error, events):
    message = str(error.value)
    assert "\n" not in message and "step 2" in message and "intact" in message
    assert [i.step for i in mgr.list()] == [1] and mgr.latest().step == 1
    assert pointer(mgr.directory) == "step_00000001"
    assert not [p for p in mgr.directory.iterdir() if p.name.startswith(".tmp-")]
    assert kinds(events, "error")[-1]["step"] == 2


@pytest.mark.parametrize("async_save", [False, True], ids=["sync", "async"])
def test_failing_write_raises_clear_error_and_keeps_previous(tmp_path, monkeypatch, async_save):
    import mindspore as ms
    _, opt, _ = make_model()
    events = tmp_path / "events.jsonl"
    mgr = CheckpointManager(tmp_path / "ckpt", keep_latest=3, events=EventLog(events), async_save=async_save)
    mgr.save(1, opt, {"step": 1})
    mgr.wait()

    def disk_full(save_obj, path, **kwargs):
        Path(path).write_bytes(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device", path)

    monkeypatch.setattr(ms, "save_checkpoint", disk_full)
    with pytest.raises(PretrainRunError) as error:
        mgr.save(2, opt, {"step": 2})
        mgr.wait()                        # async: the writer's failure surfaces here
    assert "No space left on device" in str(error.value)
    assert_failed_save_left_previous_intact(mgr, error, events)


DISK_REFUSES = textwrap.dedent("""
    import sys, json, resource, signal
    sys.path.insert(0, {repo!r})
    from mindspore import nn
    from pretrain.config.errors import PretrainRunError
    from pretrain.resilience.checkpoint import CheckpointManager, WEIGHTS
    from pretrain.resilience.events import EventLog
    opt = nn.AdamWeightDecay(nn.Dense(64, 64).trainable_params())        # ~50 KB of weights + moments
    mgr = CheckpointManager({directory!r}, keep_latest=3, events=EventLog({events!r}))
    first = mgr.save(1, opt, {{"step": 1}})
    # The kernel now refuses any write past 16 KB (EFBIG), like a full disk, for real.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (16384, resource.RLIM_INFINITY))
    try:
        mgr.save(2, opt, {{"step": 2}})
    except PretrainRunError as e:
        print("ERROR:", e)
""")


@pytest.mark.slow   # a mindspore save on a full tmpfs: 8 s under load, to keep the default suite within 5 minutes
def test_disk_refusing_writes_keeps_previous(tmp_path):
    directory, events = tmp_path / "ckpt", tmp_path / "events.jsonl"
    script = DISK_REFUSES.format(repo=str(REPO), directory=str(directory), events=str(events))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    line, = [l for l in out.stdout.splitlines() if l.startswith("ERROR:")]
    mgr = CheckpointManager(directory, keep_latest=3)

    class Raised:
        value = line[len("ERROR: "):]
    assert_failed_save_left_previous_intact(mgr, Raised, events)


def test_shape_mismatch_is_one_line_naming_both_shapes(tmp_path):
    _, opt, _ = make_model(width=8)
    mgr = CheckpointManager(tmp_path, keep_latest=1)
    mgr.save(1, opt, {})
    _, wider, _ = make_model(width=16)
    with pytest.raises(PretrainRunError) as error:
        mgr.load(mgr.latest(), wider)
    message = str(error.value)
    assert "\n" not in message and "another architecture" in message
    assert "(8, 4)" in message and "(16, 4)" in message and str(mgr.latest().path) in message
    _, deeper, _ = make_model(depth=3)
    with pytest.raises(PretrainRunError, match=r"lacks parameter '.*layers\.2\.") as error:
        mgr.load(mgr.latest(), deeper)


def test_config_hash_change_refused_unless_allowed(tmp_path):
    _, opt, _ = make_model()
    CheckpointManager(tmp_path, keep_latest=1, config_hash="aaa").save(1, opt, {"k": 1})
    mgr = CheckpointManager(tmp_path, keep_latest=1, config_hash="bbb")
    with pytest.raises(PretrainRunError, match="config hash aaa.*bbb"):
        mgr.load(mgr.latest(), opt)
    assert mgr.load(mgr.latest(), opt, allow_config_change=True) == {"k": 1}


def test_discard_from_removes_the_diverged_checkpoints(tmp_path):
    _, opt, _ = make_model()
    events = tmp_path / "events.jsonl"
    mgr = CheckpointManager(tmp_path / "ckpt", keep_latest=5, events=EventLog(events))
    for step in (10, 20, 30):
        mgr.save(step, opt, {"step": step})
    target = mgr.latest(before_step=25)
    assert target.step == 20
    removed = mgr.discard_from(target.step + 1, reason="rollback")
    assert [i.step for i in removed] == [30] and [i.step for i in mgr.list()] == [20, 10]
    assert pointer(mgr.directory) == "step_00000020"
    assert kinds(events, "prune")[-1]["reason"] == "rollback"


def test_loading_into_an_already_compiled_step_rolls_it_back_bitwise(tmp_path):
    """A loss-spike rollback loads into the running process, whose graph is compiled: the loaded
    values must be the ones the graph computes with (set_data-style loading is not)."""
    data = batches(7)
    _, _, fresh = make_model()
    reference = [float(fresh(x, y).asnumpy()) for x, y in data]
    _, opt, step = make_model()
    mgr = CheckpointManager(tmp_path, keep_latest=2)
    losses = [float(step(x, y).asnumpy()) for x, y in data[:3]]
    mgr.save(3, opt, {})
    for x, y in data[3:6]:
        step(x, y)                                   # the steps the rollback throws away
    mgr.load(mgr.latest(), opt)
    losses += [float(step(x, y).asnumpy()) for x, y in data[3:]]
    assert losses == reference
