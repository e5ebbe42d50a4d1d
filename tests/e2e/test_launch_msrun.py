"""`python -m pretrain parallel=dp2 hardware=cpu_2proc` end to end: msrun, two real CPU ranks of
the MindFormers model under MindSpore's DATA_PARALLEL with gradient all-reduce, rank 0 writing the
run's files; a killed rank failing the launch; a sweep that launches and measures."""

import csv
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from pretrain.launch.tree import alive as _alive
from pretrain.train.metrics import read_metrics
from tests.helpers import cli
from tests.helpers.models import SMALL_MODEL
from tests.helpers.net import free_port

pytestmark = pytest.mark.slow

RUN = Path("runs") / "tiny-dp2-cpu_2proc"
# A 0.6M-parameter model of the tiny architecture (vocab 4096 from the sample tokenizer) at
# seq 64: each msrun run is ~40 s on 2 cores, most of it start-up and graph compilation.
SMALL = [*SMALL_MODEL, "train.eval_every=0"]
DP2 = ["parallel=dp2", "hardware=cpu_2proc"]


@pytest.fixture
def pretrain(data_cache, tmp_path):
    """`python -m pretrain ARGS` in tmp_path with the session's data cache: run(...) waits,
    start(...) returns the Popen."""
    def start(*args):
        return cli.start(*args, cwd=tmp_path, cache=data_cache, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)

    def run(*args):
        proc = start(*args)
        out, err = proc.communicate(timeout=600)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    run.start = start
    return run


def ok(proc):
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


def rank_status(run: Path):
    return {int(p.stem.split("_")[1]): json.loads(p.read_text()) for p in (run / "logs").glob("rank_*.exit")}


def events(run: Path, kind: str):
    return [e for e in map(json.loads, (run / "events.jsonl").read_text().splitlines()) if e["kind"] == kind]


def train_records(run: Path):
    return [r for r in read_metrics(run / "metrics.jsonl") if r["kind"] == "train"]


def assert_identical_replicas_on_their_own_shards(run: Path, steps: int, per_rank: int):
    status = rank_status(run)
    assert sorted(status) == [0, 1], "exactly the two workers report: msrun's scheduler does not train"
    a, b = status[0], status[1]
    assert a["exit"] == b["exit"] == 0 and a["data_parallel"] == b["data_parallel"] == 2
    assert a["params_sha256"] == b["params_sha256"], "gradient all-reduce keeps the replicas identical"
    assert a["loss_last"] == b["loss_last"], "each rank sees the loss of the global batch"
    # each rank trained global_batch / dp rows per step, none of them the other rank's
    assert a["rows"] == b["rows"] == steps * per_rank
    assert not set(a["row_digests"]) & set(b["row_digests"])
    assert a["rows_sha256"] != b["rows_sha256"]


def wait_for_steps(proc, run: Path, steps: int) -> None:
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if (run / "metrics.jsonl").is_file() and len(train_records(run)) >= steps:
            return
        time.sleep(0.1)
    assert proc.poll() is None, f"the run ended before step {steps}:\n{proc.communicate()[1][-3000:]}"


def test_dp2_trains_identical_replicas_on_split_batches_stops_together_and_resumes(pretrain, tmp_path):
    args = [*DP2, *SMALL, f"hardware.master_port={free_port()}", "phase=general",
            "train.total_tokens=20480"]   # general: round(0.7 x 20480 / (8 x 64)) = 28 steps
    run = tmp_path / RUN
    proc = pretrain.start(*args)
    wait_for_steps(proc, run, 4)
    proc.send_signal(signal.SIGINT)   # Ctrl-C: the launcher passes it on, the ranks stop together
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    assert "launch: msrun --worker_num=2 --local_worker_num=2" in out
    # msrun tails rank 0's log, MindSpore's INFO start-up lines included; the console relay drops them
    assert "[INFO] DISTRIBUTED" in (run / "logs" / "worker_0.log").read_text()
    assert "[INFO] DISTRIBUTED" not in out + err and "compiling the training graph" in out
    (stopped,) = events(run, "signal")
    k = stopped["step"]
    assert 4 <= k < 28
    assert_identical_replicas_on_their_own_shards(run, steps=k, per_rank=8 // 2)

    # rank 0 alone wrote the run's files: one metrics line per step, one checkpoint set
    assert [r["step"] for r in train_records(run)] == list(range(1, k + 1))
    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == len({(json.loads(x)["kind"], json.loads(x)["step"]) for x in lines})
    checkpoints = sorted(p.name for p in (run / "checkpoints").iterdir() if p.name.startswith("step_"))
    assert checkpoints == [f"step_{k:08d}"] and [e["step"] for e in events(run, "save")] == [k]
    assert sorted(p.name for p in (run / "checkpoints" / checkpoints[0]).iterdir()) == \
        ["manifest.json", "state.json", "weights.safetensors"]
    exported = (run / "mindformers.yaml").read_text()
    assert "parallel_mode: 0" in exported and "data_parallel: 2" in exported
    assert "trained" not in (run / "logs" / "scheduler.log").read_text()

    # the same command again continues from that checkpoint on both ranks, as with one process
    out = ok(pretrain(*args)).stdout   # the same port: runs on one host reuse it in turn
    (resumed,) = events(run, "resume")
    assert resumed["step"] == k and resumed["handoff"] is False
    assert [r["step"] for r in train_records(run)] == list(range(1, 29))
    assert_identical_replicas_on_their_own_shards(run, steps=28 - k, per_rank=4)   # both loaded it
    summary = json.loads((run / "summary.json").read_text())
    assert summary["global_step"] == 28 and "trained" in out
    # the gradient all-reduce timed on both ranks after training, beside the plan's communication
    (phase,) = summary["phases"]
    assert 0 < phase["measured"]["comm_s"] < phase["measured"]["step_s"]
    measured = phase["measured"]
    assert measured["comm_share"] == pytest.approx(measured["comm_s"] / measured["step_s"])
    assert "all-reduce s" in out and phase["planned"]["comm_s"] >= 0


def test_a_killed_worker_fails_the_launch_with_its_rank_and_a_restart_resumes(pretrain, tmp_path):
    args = [*DP2, *SMALL, f"hardware.master_port={free_port()}", "phase=general",
            "train.total_tokens=20480", "train.save_every_steps=3",
            "resilience.max_restarts=0"]   # 28 steps; no automatic restart (test_elastic_e2e.py has those)
    run = tmp_path / RUN
    proc = pretrain.start(*args)
    wait_for_steps(proc, run, 7)
    victim = int((run / "logs" / "rank_1.pid").read_text())
    killed = time.time()
    os.kill(victim, signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    print(f"killed rank 1 -> launch exited in {time.time() - killed:.2f} s")
    assert proc.returncode == 75, err[-3000:]   # EX_TEMPFAIL: resumable, not a user error (2)
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "rank 1 of 2 ended without an exit status" in errors[0]
    assert "max_restarts=0 (no automatic restart)" in errors[0]
    assert "resumes from its last checkpoint" in errors[0]
    assert 1 not in rank_status(run)
    assert not _alive(int((run / "logs" / "rank_0.pid").read_text()))   # the surviving rank was stopped

    last = max(int(p.name.split("_")[1].split("-")[0]) for p in (run / "checkpoints").glob("step_*"))
    assert last >= 6 and last % 3 == 0
    ok(pretrain(*args))
    resumed = events(run, "resume")
    assert len(resumed) == 1 and resumed[0]["step"] == last and resumed[0]["handoff"] is False
    assert [r["step"] for r in train_records(run)] == list(range(1, 29))
    assert_identical_replicas_on_their_own_shards(run, steps=28 - last, per_rank=4)


def test_a_failing_worker_fails_the_launch_with_its_last_error_lines(pretrain, tmp_path, monkeypatch):
    # Every rank hangs in step 3 (test-only fault injection); each one's watchdog exits it with 75.
    monkeypatch.setenv("PRETRAIN_FAULTS", json.dumps({"hang_at": 3}))
    proc = pretrain(*DP2, *SMALL, f"hardware.master_port={free_port()}", "phase=general",
                    "train.total_tokens=8192", "resilience.watchdog_timeout_s=3", "resilience.max_restarts=1")
    # a hang is restarted like a death, once here; it hangs again and the budget is spent: exit 75
    assert proc.returncode == 75
    (error,) = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    # the watchdog exits below Python (os._exit(75)) but leaves the rank's exit status first
    assert re.search(r"rank [01] of 2 exited with code 75 \(watchdog: the step after step 2", error)
    assert "resilience.max_restarts=1 restarts within resilience.restart_window=3600 s are spent" in error
    (restart,) = events(tmp_path / RUN, "restart")
    assert restart["exit"] == 75 and "watchdog" in restart["cause"] and "restart 1/1" in proc.stdout
    assert "watchdog: the step after step 2 has not finished" in error
    assert f"Last lines of {tmp_path / RUN / 'logs'}/worker_" in error


def test_a_sweep_launches_each_valid_layout_and_records_measured_throughput(pretrain, tmp_path):
    proc = ok(pretrain("-m", "parallel=single,dp2", "hardware=cpu,cpu_2proc", *SMALL, "phase=general",
                       "train.total_tokens=4096", f"hardware.master_port={free_port()}",
                       "data.num_shards=2",   # the dp2 tests' prepared data, for both layouts
                       "hydra.sweep.dir=sweep"))
    rows = list(csv.DictReader((tmp_path / "sweep" / "summary.csv").read_text().splitlines()))
    by = {(r["label"]): r for r in rows}
    assert len(rows) == 4, proc.stdout[-2000:]
    valid = {"parallel=single hardware=cpu", "parallel=dp2 hardware=cpu_2proc"}
    for label, row in by.items():
        if label in valid:
            assert row["status"] == "ok" and float(row["measured_tokens_per_s"]) > 0, row
            assert float(row["tokens_per_s"]) > 0            # the planner's estimate beside it
        else:
            assert row["status"] == "invalid" and "devices" in row["reason"] and not row["measured_tokens_per_s"]
    assert rank_status(tmp_path / "sweep" / "3")[1]["exit"] == 0   # job 3 (dp2 on cpu_2proc) ran under msrun
