"""Issue 14 end to end: msrun with 2 real CPU ranks of the (shrunken) MindFormers model, a rank
killed with SIGKILL from outside, and the launcher keeping the job going by itself.

- killed once: the launcher restarts the job from its newest checkpoint and it finishes with the
  final weights of an uninterrupted run (bitwise: sha256 of the fp32 parameters, tolerance 0);
- killed every time it comes back: after resilience.max_restarts the job leaves rank 1 out and goes
  on as one process (dp 2 -> 1, grad_accum 1 -> 2, the same global batch of 8); the global samples
  it trains, in order, are the uninterrupted run's, and its losses are those of a single process
  resumed by hand from the same checkpoint;
- that by-hand resume of the dp2 run with parallel=single (the same rule, the same check; the data
  prepared again for one shard, data.num_shards following parallel.dp).
Each test prints the seconds from the kill to the first step after the restart and the steps lost.
"""
import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from pretrain.rundir import MARKER
from tests.helpers.elastic_run import DP2, STEPS, Cli, events, losses, status, train_steps
from tests.helpers.net import free_port

pytestmark = pytest.mark.slow


class Victim:
    """Kills rank 1 with SIGKILL once it has trained `after` steps since it started, `times` times,
    and times each kill to the first step the restarted job trains."""

    def __init__(self, run: Path, after: int, times: int):
        self.run, self.after, self.times = run, after, times
        self.kills = []   # {"at": time, "last": last step logged}

    def watch(self, proc) -> None:
        pid, seen_at = None, 0
        while proc.poll() is None:
            time.sleep(0.05)
            pid_file = self.run / "logs" / "rank_1.pid"
            try:
                new = int(pid_file.read_text())
            except (OSError, ValueError):
                continue
            if new != pid:
                pid, seen_at = new, len(train_steps(self.run))
            if len(self.kills) < self.times and len(train_steps(self.run)) >= seen_at + self.after:
                last = max(train_steps(self.run))
                os.kill(pid, signal.SIGKILL)
                self.kills.append({"at": time.time(), "last": last})
                self._first_step_after(proc)

    def _first_step_after(self, proc) -> None:
        """The first step of the restarted job: the metrics are rewound to the checkpoint it resumes
        from (<= that step), then its next step appears."""
        kill = self.kills[-1]
        rewound = None
        while proc.poll() is None and "first_step_s" not in kill:
            time.sleep(0.05)
            done = [e for e in events(self.run, "restart") + events(self.run, "shrink")
                    if e["ts"] >= kill["at"]]
            if not done:
                continue
            resume = done[0]["resume_step"] or 0
            steps = train_steps(self.run)
            if rewound is None and (not steps or max(steps) <= resume):
                rewound = True
            if rewound and resume + 1 in steps:
                kill.update(first_step_s=round(time.time() - kill["at"], 2), resume=resume,
                            lost=kill["last"] - resume,
                            detected_s=round(done[0]["failed_at"] - kill["at"], 2))


@pytest.fixture(scope="module")
def cli(data_cache, tmp_path_factory):
    return Cli(tmp_path_factory.mktemp("elastic"), data_cache)


@pytest.fixture(scope="module")
def reference(cli):
    """The uninterrupted dp2 run: its losses, final weights and global sample order."""
    run = cli.cwd / "reference"
    cli.finish(cli.start(str(run), *DP2, f"hardware.master_port={free_port()}"))
    ranks = status(run)
    per_step = ranks[0]["rows"] // STEPS
    order = []   # global step k: rank 0's rows of step k, then rank 1's (the global slot order)
    for k in range(STEPS):
        for r in (0, 1):
            order += ranks[r]["row_digests"][k * per_step:(k + 1) * per_step]
    return {"run": run, "losses": losses(run), "params": ranks[0]["params_sha256"], "order": order}


@pytest.fixture(scope="module")
def elastic(cli):
    """Rank 1 killed each time it comes back: one restart allowed, then the job shrinks."""
    run = cli.cwd / "elastic"
    proc = cli.start(str(run), *DP2, f"hardware.master_port={free_port()}", "resilience.max_restarts=1",
                     "resilience.elastic=true", "hardware.min_devices=1")
    victim = Victim(run, after=4, times=2)
    victim.watch(proc)
    out = cli.finish(proc)
    print(f"\nelastic: kills {victim.kills}")
    return {"run": run, "out": out, "kills": victim.kills}


def test_a_rank_killed_once_is_restarted_by_the_launcher_and_the_run_ends_as_if_uninterrupted(cli, reference):
    run = cli.cwd / "restart"
    proc = cli.start(str(run), *DP2, f"hardware.master_port={free_port()}", "resilience.max_restarts=2")
    victim = Victim(run, after=7, times=1)
    victim.watch(proc)
    out = cli.finish(proc)
    (kill,) = victim.kills
    print(f"\nrestart: rank 1 killed at step {kill['last']}: detected {kill['detected_s']} s later, "
          f"first step after the restart {kill['first_step_s']} s later, {kill['lost']} steps lost")
    (restart,) = events(run, "restart")
    assert restart["rank"] == 1 and restart["exit"] is None and restart["restart"] == 1
    assert "rank 1 of 2 ended without an exit status" in restart["cause"]
    assert restart["steps_lost"] == restart["last_step"] - restart["resume_step"] == kill["lost"]
    assert restart["resume_step"] % 3 == 0 and 0 <= restart["steps_lost"] < 3 + 2
    assert [e["step"] for e in events(run, "resume")] == [restart["resume_step"]]
    assert "restart 1/2" in out and "ended without an exit status" in out
    assert losses(run) == reference["losses"]   # every step, bitwise
    ranks = status(run)
    assert ranks[0]["params_sha256"] == ranks[1]["params_sha256"] == reference["params"]   # tolerance 0


def test_a_rank_that_keeps_failing_is_left_out_and_the_job_finishes_on_one_process(elastic, reference):
    run = elastic["run"]
    first, second = elastic["kills"]
    (restart,) = events(run, "restart")
    (shrink,) = events(run, "shrink")
    print(f"\nrestart: detected in {first['detected_s']} s, {first['first_step_s']} s to the first step, "
          f"{first['lost']} steps lost; shrink: detected in {second['detected_s']} s, "
          f"{second['first_step_s']} s to the first step, {second['lost']} steps lost")
    assert restart["rank"] == 1 and shrink["rank"] == 1 and shrink["device"] == 1
    assert (shrink["dp_from"], shrink["dp_to"], shrink["grad_accum"]) == (2, 1, 2)
    assert "data parallel 2 -> 1" in elastic["out"]
    frozen = (run / "config.yaml").read_text()
    assert "dp: 1" in frozen and "grad_accum: 2" in frozen and "devices_per_node: 1" in frozen
    s = shrink["resume_step"]
    assert [e["step"] for e in events(run, "resume")] == [restart["resume_step"], s]
    assert json.loads((run / "summary.json").read_text())["global_step"] == STEPS
    mine = losses(run)
    assert sorted(mine) == list(range(1, STEPS + 1))
    before = {k: v for k, v in reference["losses"].items() if k <= s}
    assert {k: v for k, v in mine.items() if k <= s} == before
    # the one process after the shrink trained global steps s+1.. with exactly the uninterrupted
    # run's samples, in order: nothing repeated or skipped across the change
    (alone,) = status(run).values()
    assert alone["data_parallel"] == 1 and alone["rows"] == (STEPS - s) * 8
    assert alone["row_digests"] == reference["order"][s * 8:]


def test_a_dp2_run_resumed_by_hand_on_one_process_follows_the_same_rule(cli, elastic, reference):
    """The checkpoint the shrink resumed from, resumed with parallel=single by hand (micro-batch 4,
    as the shrunk job: then even the grad_accum matches and the losses must be equal)."""
    s = events(elastic["run"], "shrink")[0]["resume_step"]
    run = cli.cwd / "by_hand"
    (run / "checkpoints").mkdir(parents=True)
    shutil.copytree(elastic["run"] / "checkpoints" / f"step_{s:08d}", run / "checkpoints" / f"step_{s:08d}")
    (run / MARKER).touch()   # a directory of copied checkpoints is claimed as the refusal says (rundir.py)
    out = cli.finish(cli.start(str(run), "parallel=single", "hardware=cpu", "parallel.micro_batch_size=4"))
    assert "parallel.dp 2 -> 1" in out   # the config change is allowed and said
    (change,) = [e for e in events(run, "config_change") if e["key"] == "parallel.dp"]
    assert (change["old"], change["new"]) == (2, 1)
    mine = losses(run)
    assert sorted(mine) == list(range(s + 1, STEPS + 1))
    # bitwise the shrunk job's losses, whose samples are the uninterrupted run's (the test above):
    # the same weights fed the same rows in the same order, step after step
    assert mine == {k: v for k, v in losses(elastic["run"]).items() if k > s}
