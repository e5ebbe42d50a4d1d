"""Metrics sinks (JSONL, TensorBoard events, progress bar) and the loss/LR curve (no mindspore)."""

import json
import struct
from pathlib import Path

from pretrain.train.metrics import MetricsWriter, mean_of, phase_boundaries, read_metrics
from pretrain.train.plot import plot_curves


def tensorboard_scalars(directory: Path):
    """{tag: [(step, value), ...]} from the TFRecord-framed event files tensorboardX wrote."""
    from tensorboardX.proto import event_pb2

    out = {}
    for path in sorted(directory.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        pos = 0
        while pos < len(data):
            (length,) = struct.unpack("<Q", data[pos : pos + 8])
            event = event_pb2.Event.FromString(data[pos + 12 : pos + 12 + length])
            pos += 12 + length + 4
            for value in event.summary.value:
                out.setdefault(value.tag, []).append((event.step, value.simple_value))
    return out


def record(step, phase, loss, lr=1e-3):
    return {
        "kind": "train",
        "step": step,
        "phase": phase,
        "loss": loss,
        "lr": lr,
        "grad_norm": 1.0,
        "loss_scale": 1.0,
        "finite": True,
        "tokens_per_s": 100.0,
        "mfu": 0.1,
        "step_time_s": 0.5,
        "host_mem_gb": 1.0,
    }


def test_records_reach_jsonl_tensorboard_and_the_progress_bar(tmp_path, capsys):
    writer = MetricsWriter(tmp_path)
    writer.start_phase("general", 2)
    for step, loss in [(1, 8.0), (2, 7.0)]:
        writer.progress(record(step, "general", loss))
        writer.log(record(step, "general", loss))
    writer.log({"kind": "val", "step": 2, "phase": "general", "val_loss": 7.5})
    writer.close()
    assert [r["loss"] for r in read_metrics(tmp_path / "metrics.jsonl") if r["kind"] == "train"] == [8.0, 7.0]
    scalars = tensorboard_scalars(tmp_path / "tensorboard")
    assert scalars["train/loss"] == [(1, 8.0), (2, 7.0)]
    assert scalars["val/val_loss"] == [(2, 7.5)]
    assert {
        "train/lr",
        "train/grad_norm",
        "train/loss_scale",
        "train/tokens_per_s",
        "train/mfu",
        "train/step_time_s",
        "train/host_mem_gb",
    } <= set(scalars)
    assert "train/finite" not in scalars
    assert "loss 7.000" in capsys.readouterr().out  # the live loss on the bar


def test_a_disabled_writer_writes_nothing(tmp_path):
    writer = MetricsWriter(tmp_path, enabled=False)
    writer.log(record(1, "general", 8.0))
    writer.close()
    assert list(tmp_path.iterdir()) == []


def test_reading_back_keeps_the_last_record_per_step_and_finds_phase_spans(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lines = [
        record(1, "general", 9.0),
        record(2, "general", 8.0),
        record(1, "general", 8.5),  # re-run of step 1
        record(3, "reasoning", 7.0),
        record(4, "reasoning", 6.0),
        record(5, "anneal", 5.0),
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines) + '{"kind": "tra')  # torn last line
    records = read_metrics(path)
    assert [(r["step"], r["loss"]) for r in records] == [(1, 8.5), (2, 8.0), (3, 7.0), (4, 6.0), (5, 5.0)]
    assert phase_boundaries(records) == [("general", 1, 2), ("reasoning", 3, 4), ("anneal", 5, 5)]


def test_phase_start_and_end_loss_average_a_window():
    values = [10.0, 9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0]
    assert mean_of(values, first=True) == 9.5 and mean_of(values, first=False) == 1.5
    assert mean_of([4.0], first=True) == 4.0


def test_the_curve_png_marks_every_phase(tmp_path):
    writer = MetricsWriter(tmp_path)
    for step in range(1, 31):
        phase = "general" if step <= 20 else "reasoning" if step <= 26 else "anneal"
        writer.log(record(step, phase, 8.0 - step * 0.1, lr=1e-3 / step))
        if step % 10 == 0:
            writer.log({"kind": "val", "step": step, "phase": phase, "val_loss": 8.0 - step * 0.1})
    writer.close()
    out = plot_curves(tmp_path / "metrics.jsonl", tmp_path / "loss_curve.png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    assert not list(tmp_path.glob(".*png"))  # the render temp file is gone
