"""The JSONL events log: valid lines, thread safety, and nothing lost to a kill -9."""
import json
import threading

import pytest

from pretrain.resilience.events import EventLog, read_events


def test_every_line_is_json_with_ts_and_kind(tmp_path):
    path = tmp_path / "run" / "events.jsonl"
    with EventLog(path) as events:
        events.log("start", step=0, config_hash="abc")
        events.log("save", step=10, path=tmp_path / "ckpt", stall_s=0.01)
    with EventLog(path) as events:          # a restarted run appends
        events.log("resume", step=10)
    lines = path.read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["kind"] for r in records] == ["start", "save", "resume"]
    assert all(isinstance(r["ts"], float) for r in records) and records[1]["path"] == str(tmp_path / "ckpt")
    assert read_events(path) == records


def test_unknown_kind_is_refused(tmp_path):
    with EventLog(tmp_path / "e.jsonl") as events, pytest.raises(ValueError, match="unknown event kind"):
        events.log("reboot")


def test_threads_never_interleave_lines(tmp_path):
    path = tmp_path / "e.jsonl"
    events = EventLog(path)

    def writer(n):
        for i in range(300):
            events.log("skip", thread=n, i=i, pad="x" * 500)
    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    events.close()
    assert len(read_events(path)) == 1200


def test_torn_last_line_is_dropped_but_a_torn_middle_line_is_an_error(tmp_path):
    path = tmp_path / "e.jsonl"
    path.write_text('{"ts": 1.0, "kind": "start"}\n{"ts": 2.0, "ki')
    assert [e["kind"] for e in read_events(path)] == ["start"]
    path.write_text('{"ts": 1.0, "ki\n{"ts": 2.0, "kind": "start"}\n')
    with pytest.raises(json.JSONDecodeError):
        read_events(path)
