"""`pretrain status` on synthetic run dirs written by the run's own writers (EventLog, MetricsWriter,
the run-dir lock), and the goodput accounting it shares with the summary and the chaos benchmark."""
import hashlib
import json
import time
from pathlib import Path

import pytest

from pretrain.resilience import goodput as gp
from pretrain.resilience.events import EventLog
from pretrain.rundir import RunDirLock
from pretrain.status import render, report
from pretrain.status.jsonl import JsonlFile
from tests.helpers.status_run import status_run_dir, train_record


def _checkpoint(run: Path, step: int, truncate: bool = False) -> Path:
    path = run / "checkpoints" / f"step_{step:08d}"
    path.mkdir(parents=True)
    files = {}
    for name, data in (("weights.safetensors", b"w" * 1000), ("state.json", b"{}")):
        (path / name).write_bytes(data)
        files[name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (path / "manifest.json").write_text(json.dumps({"step": step, "created": time.time(), "files": files}))
    if truncate:
        (path / "weights.safetensors").write_bytes(b"w" * 10)
    return path


def test_goodput_splits_the_wall_by_cause():
    events = [{"ts": 0.0, "kind": "start", "step": 0},
              {"ts": 50.0, "kind": "save", "step": 40, "stall_s": 2.0},
              {"ts": 60.0, "kind": "rollback", "step": 45, "to_step": 40},
              {"ts": 105.0, "kind": "restart", "failed_at": 100.0, "steps_lost": 5},
              {"ts": 110.0, "kind": "start", "step": 50},
              {"ts": 300.0, "kind": "signal", "step": 120},
              {"ts": 400.0, "kind": "start", "step": 120}]
    firsts = {1: {"ts": 11.0}, 51: {"ts": 121.0}, 121: {"ts": 403.0}}
    g = gp.account(events, steps=150, step_s=1.0, end_ts=500.0, first_step=firsts.get, eval_s=4.0)
    bad = g.badput_s
    assert bad["startup_compile"] == pytest.approx(10.0 + 2.0)    # 0 -> 11 less a step; 400 -> 403 less one
    assert bad["restarts"] == pytest.approx(20.0)                 # failed at 100, first step done at 121
    assert bad["redone"] == pytest.approx(10.0)                   # 5 lost by the restart + 5 rolled back
    assert bad["checkpoints"] == 2.0 and bad["evaluation"] == 4.0
    assert bad["idle"] == pytest.approx(100.0)                    # the signal at 300 to the start at 400
    assert g.productive_s == 150.0 and g.wall_s == 500.0
    assert g.goodput == pytest.approx(gp.goodput_of(150, 1.0, 500.0)) == pytest.approx(0.3)
    assert g.productive_s + sum(bad.values()) == pytest.approx(g.wall_s)


def test_metrics_are_found_by_offset_without_reading_every_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    with open(path, "w") as fh:
        for k in range(1, 5001):
            fh.write(json.dumps({**train_record(k), "ts": 1000.0 + k}) + "\n")
            if k % 50 == 0:
                fh.write(json.dumps({"kind": "val", "step": k, "val_loss": 1.0, "ts": 1000.0 + k}) + "\n")
        fh.write('{"kind": "train", "step": 5001, "lo')    # the writer mid-line
    with JsonlFile(path) as mf:
        for k in (1, 50, 51, 2500, 5000):
            assert mf.record_at(k)["step"] == k
        assert mf.record_at(5001) is None and mf.record_at(0) is None
        assert [r["step"] for r in mf.tail(3)] == [4999, 5000, 5000]
        hour = mf.sample(mf.bisect(lambda r: r["ts"], 1000.0 + 4000), 50)
        assert hour[0]["step"] >= 4000 and len(hour) > 30
        steps = [r["step"] for r in mf.sample(0, 100)]
        assert steps == sorted(steps) and steps[0] < 100 and steps[-1] > 4900


def test_a_live_run_is_healthy_then_stalled_past_the_watchdog(tmp_path):
    run = status_run_dir(tmp_path)
    _checkpoint(run, 30)
    lock = RunDirLock(run).acquire()
    try:
        now = time.time()
        r = report.gather(run, now=now)
        assert r["running"] and r["exit"] == 0 and r["verdict"].startswith("healthy"), r["verdict"]
        assert r["progress"]["step"] == 30 and r["progress"]["total_steps"] == 50
        assert r["progress"]["phases"][0]["tokens"] == 3000
        assert r["loss"]["val_last"] == 7.5 and r["loss"]["last"] == pytest.approx(7.7)
        assert r["checkpoint"]["verified"] and r["checkpoint"]["free_checkpoints"] > 0
        assert r["goodput"]["badput_s"]["evaluation"] > 0 or r["goodput"]["wall_s"] < 1
        stalled = report.gather(run, now=now + 61)
        assert stalled["exit"] == 2 and "resilience.watchdog_timeout_s" in stalled["verdict"]
    finally:
        lock.release()


def test_finished_killed_and_restarted_runs(tmp_path):
    run = status_run_dir(tmp_path)
    killed = report.gather(run)
    assert not killed["running"] and killed["exit"] == 2 and "killed -9" in killed["verdict"]
    with EventLog(run / "events.jsonl") as ev:
        ev.log("restart", cause="rank 1 exited -9; see logs", rank=1, failed_at=time.time(), steps_lost=4,
               resume_step=26)
        ev.log("start", step=26, phases=["general", "anneal"], steps=[40, 10])
    lock = RunDirLock(run).acquire()
    try:
        r = report.gather(run)
        assert r["exit"] == 1 and "restart(s) in the last hour (rank 1 exited -9)" in r["verdict"]
        assert r["restarts"][0]["steps_lost"] == 4 and r["goodput"]["badput_s"]["redone"] > 0
        assert ": rank 1 exited -9 (rank 1); 4 steps lost" in render.text(r)   # the cause up to its first "; "
        with EventLog(run / "events.jsonl") as ev:   # the job controller's causes name the node first
            ev.log("restart", cause="node 1: rank 1 of 2 ended", node=1, rank=1, failed_at=time.time(),
                   steps_lost=2, resume_step=28)
        assert ": node 1: rank 1 of 2 ended; 2 steps lost" in render.text(report.gather(run))
    finally:
        lock.release()
    with EventLog(run / "events.jsonl") as ev:
        ev.log("finish", step=30)
    done = report.gather(run)
    assert done["exit"] == 0 and done["verdict"] == "finished at step 30"


def test_a_checkpoint_that_does_not_verify_degrades_a_live_run(tmp_path):
    run = status_run_dir(tmp_path)
    _checkpoint(run, 25)
    _checkpoint(run, 30, truncate=True)
    with RunDirLock(run):
        r = report.gather(run)
    assert r["exit"] == 1 and "step_00000030 does not verify" in r["verdict"]


def test_the_summary_and_status_account_a_run_alike(tmp_path):
    from pretrain.train.summary import run_goodput

    run = status_run_dir(tmp_path)
    with EventLog(run / "events.jsonl") as ev:
        ev.log("save", step=30, stall_s=0.25)
        ev.log("finish", step=30)
    acct = run_goodput(run, 0.1, 30)
    assert acct["badput_s"]["checkpoints"] == 0.25 and acct["badput_s"]["evaluation"] > 0
    assert acct["goodput"] == pytest.approx(gp.goodput_of(30, 0.1, acct["wall_s"]))
    assert any(p.name.startswith("events.out") for p in (run / "tensorboard").iterdir())
    (run / "summary.json").write_text(json.dumps({"global_step": 30, "measured": {"step_s": 0.1},
                                                  "goodput": acct}))
    status = report.gather(run)["goodput"]
    assert status["goodput"] == pytest.approx(acct["goodput"]) and status["wall_s"] == acct["wall_s"]


def test_evaluation_of_a_live_run_counts_the_first_pass_as_it_took(tmp_path):
    """The first pass compiles the eval graph (15 s of the default job's 50 s): a median of the recent
    passes for every pass would leave that out."""
    run = status_run_dir(tmp_path, eval_s=lambda step: 10.0 if step == 5 else 1.0)   # passes at 5, 10, ..., 30
    with RunDirLock(run):
        live = report.gather(run)["goodput"]["badput_s"]["evaluation"]
    assert live == pytest.approx(10.0 + 5 * 1.0)


def test_an_ended_run_is_accounted_as_its_summary_says(tmp_path):
    """Ended, the summary's accounting (every val record read) is the answer, not status's estimate."""
    from pretrain.train.summary import run_goodput

    run = status_run_dir(tmp_path, eval_s=lambda step: (step / 5) ** 2)   # 1, 4, ..., 36 s: median x 6 = 75 s
    with EventLog(run / "events.jsonl") as ev:
        ev.log("finish", step=30)
    acct = run_goodput(run, 0.1, 30)
    assert acct["badput_s"]["evaluation"] == pytest.approx(1 + 4 + 9 + 16 + 25 + 36)
    (run / "summary.json").write_text(json.dumps({"global_step": 30, "measured": {"step_s": 0.1},
                                                  "goodput": acct}))
    assert report.gather(run)["goodput"] == acct


def test_the_chaos_benchmark_accounts_with_the_same_code(tmp_path):
    from pretrain.resilience.observe import accounting

    run = status_run_dir(tmp_path)
    started = json.loads((run / "events.jsonl").read_text().splitlines()[0])["ts"] - 5.0   # its launch
    result = {"steps": 30, "started": started, "wall_s": 20.0}
    acct = accounting(run, result, 0.1)
    assert acct.goodput == pytest.approx(gp.goodput_of(30, 0.1, 20.0)) == pytest.approx(0.15)
    assert acct.badput_s["startup_compile"] >= 5.0 - 0.1   # its launch to the first step, less a step
