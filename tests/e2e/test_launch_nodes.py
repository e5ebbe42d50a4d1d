"""Issue 21 end to end: a 2-node job on this one host (hardware=cpu_2x1: each node's
RUN_DIR/launch/node_<r>.sh in a network namespace of its own, two separate process trees that
rendezvous through msrun's real scheduler on node 0), under the job controller.

- uninterrupted, its per-step losses and final weights equal the one-host dp2 run's (cpu_2proc);
- kill -9 of node 1's whole tree (bash, msrun, its worker) at step k: the controller stops node 0's
  tree too, restarts both nodes from the newest checkpoint on a fresh port, and every step's loss
  and the final weights are bitwise the uninterrupted run's.
Prints, for the kill, the seconds to detection and to the first step after, and the steps lost.
Issue 40: node 1's whole tree stopped (SIGSTOP) is reported as node 1 timing out, not as a scheduler
whose port was taken; the namespaces of a controller killed with kill -9 are removed by its orphan
watch once the ranks stopped, not left for the next run.
Needs root (network namespaces).
"""
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from pretrain.launch import tree
from tests.helpers.elastic_run import DP2, STEPS, Cli, events, losses, status, train_steps
from tests.helpers.net import free_port

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")]

NODES = ["parallel=dp2", "hardware=cpu_2x1"]


@pytest.fixture(scope="module")
def cli(data_cache, tmp_path_factory):
    return Cli(tmp_path_factory.mktemp("nodes"), data_cache)


@pytest.fixture(scope="module")
def reference(cli):
    run = cli.cwd / "reference"
    cli.finish(cli.start(str(run), *DP2, f"hardware.master_port={free_port()}"))
    return {"losses": losses(run), "params": status(run)[0]["params_sha256"]}


def raw_steps(run: Path):
    """Every train line of metrics.jsonl in file order (a restarted job appends its steps again)."""
    try:
        return [json.loads(ln)["step"] for ln in (run / "metrics.jsonl").read_text().splitlines()
                if '"kind": "train"' in ln and ln.endswith("}")]
    except OSError:
        return []


def node_tree(run: Path, rank: int):
    """Every process of the node that runs `rank`: those carrying its worker's tree tag."""
    tag = tree.tag_of(int((run / "logs" / f"rank_{rank}.pid").read_text()))
    assert tag, f"rank {rank}'s worker carries no tree tag"
    return tag, tree.tagged([tag])


def at_step_7_node_1(cli, run, act):
    """Start the 2-node job (2 restarts allowed); once it logged step 7, `act(pid)` on every process of
    node 1's tree. Returns the job's process and what was done: when, the last step, the tree's tag and
    how many step lines metrics.jsonl held."""
    proc = cli.start(str(run), *NODES, "resilience.max_restarts=2")
    while proc.poll() is None:
        time.sleep(0.05)
        if len(train_steps(run)) >= 7:
            tag, pids = node_tree(run, 1)
            assert len(pids) >= 3   # bash, msrun, the worker (and none of node 0's)
            last = max(train_steps(run))
            for pid in pids:
                act(pid)
            return proc, {"at": time.time(), "last": last, "tag": tag, "lines": len(raw_steps(run))}
    raise AssertionError(f"the job ended (exit {proc.returncode}) before step 7")


def test_two_nodes_on_one_host_train_as_the_one_host_dp2_run(cli, reference):
    run = cli.cwd / "nodes"
    out = cli.finish(cli.start(str(run), *NODES))
    assert "launch: 2 nodes, master 10." in out
    ranks = status(run)
    assert sorted(ranks) == [0, 1] and ranks[0]["data_parallel"] == 2
    assert losses(run) == reference["losses"]            # every step, bitwise
    assert ranks[0]["params_sha256"] == ranks[1]["params_sha256"] == reference["params"]
    # two process trees: each node's own log, the scheduler on node 0 only
    assert (run / "logs" / "node_0.log").is_file() and (run / "logs" / "node_1.log").is_file()
    assert "Start scheduler process" in (run / "logs" / "node_0.log").read_text()
    assert "Start scheduler process" not in (run / "logs" / "node_1.log").read_text()


def test_node_1_killed_whole_the_controller_restarts_every_node_and_the_run_is_unchanged(cli, reference):
    run = cli.cwd / "killed"
    proc, killed = at_step_7_node_1(cli, run, tree.sigkill)
    first_step = None
    while proc.poll() is None and first_step is None:   # the first step line written after the kill
        time.sleep(0.05)
        if len(raw_steps(run)) > killed["lines"]:
            first_step = time.time() - killed["at"]
    out = cli.finish(proc)
    (restart,) = events(run, "restart")
    detected = restart["failed_at"] - killed["at"]
    (resumed,) = events(run, "resume")   # logged once the restarted ranks built the model and loaded it
    print(f"\nnode 1 killed at step {killed['last']}: detected {detected:.2f} s later, first step after "
          f"{first_step:.2f} s (restart -> resumed {resumed['ts'] - restart['ts']:.2f} s: process start, "
          f"rendezvous, build, load; resumed -> first step "
          f"{killed['at'] + first_step - resumed['ts']:.2f} s: "
          f"graph compile + 1 step), {restart['steps_lost']} steps lost")
    assert restart["node"] == 1 and restart["rank"] == 1 and restart["exit"] is None
    assert "node 1: rank 1 of 2 ended without an exit status" in restart["cause"]
    assert restart["steps_lost"] == restart["last_step"] - restart["resume_step"]
    assert "restart 1/2" in out and "of all 2 nodes" in out
    assert not tree.tagged([killed["tag"]])
    assert [e["step"] for e in events(run, "resume")] == [restart["resume_step"]]
    assert losses(run) == reference["losses"]
    ranks = status(run)
    assert ranks[0]["params_sha256"] == ranks[1]["params_sha256"] == reference["params"]
    assert json.loads((run / "summary.json").read_text())["global_step"] == STEPS


def test_a_stopped_rank_is_caught_by_its_peers_watchdog_and_every_node_restarts(cli, reference):
    """SIGSTOP of node 1's rank (a hung device, a stuck process): node 0's rank waits in the
    all-reduce until its watchdog exits it (75); the controller kills both trees (the stopped one
    too) and restarts them; the run ends as if uninterrupted."""
    run = cli.cwd / "stopped"
    proc = cli.start(str(run), *NODES, "resilience.max_restarts=2", "resilience.watchdog_timeout_s=10")
    stopped = None
    while proc.poll() is None and stopped is None:
        time.sleep(0.05)
        if len(train_steps(run)) >= 7:
            pid = int((run / "logs" / "rank_1.pid").read_text())
            os.kill(pid, signal.SIGSTOP)
            stopped = {"at": time.time(), "lines": len(raw_steps(run)), "pid": pid}
    first_step = None
    while proc.poll() is None and first_step is None:
        time.sleep(0.05)
        if len(raw_steps(run)) > stopped["lines"]:
            first_step = time.time() - stopped["at"]
    cli.finish(proc)
    (restart,) = events(run, "restart")
    print(f"\nrank 1 stopped: detected {restart['failed_at'] - stopped['at']:.2f} s later (watchdog 10 s), "
          f"first step after {first_step:.2f} s, {restart['steps_lost']} steps lost")
    assert restart["exit"] == 75 and "watchdog" in restart["cause"]
    assert not tree.alive(stopped["pid"])
    assert losses(run) == reference["losses"]
    ranks = status(run)
    assert ranks[0]["params_sha256"] == ranks[1]["params_sha256"] == reference["params"]


def test_a_node_killed_each_time_it_returns_is_left_out_and_the_job_finishes_on_one_node(cli, reference):
    """resilience.elastic: node 1's tree killed every time it comes back; one restart allowed,
    then the job leaves node 1 out and goes on alone (dp 2 -> 1, grad_accum 1 -> 2, the same
    global batch), from its newest checkpoint, to the end."""
    run = cli.cwd / "elastic"
    proc = cli.start(str(run), *NODES, "resilience.max_restarts=1", "resilience.elastic=true",
                     "hardware.min_devices=1")
    kills, seen = [], None
    while proc.poll() is None and len(kills) < 2:
        time.sleep(0.05)
        try:
            pid = int((run / "logs" / "rank_1.pid").read_text())
        except (OSError, ValueError):
            continue
        if pid != seen:
            seen, base = pid, len(raw_steps(run))
        if len(raw_steps(run)) >= base + 4:
            try:
                _, pids = node_tree(run, 1)
            except OSError:   # rank 1 ended meanwhile: its next generation is the one to kill
                continue
            for p in pids:
                tree.sigkill(p)
            kills.append({"at": time.time(), "lines": len(raw_steps(run))})
            base = float("inf")   # until node 1 is back (a new pid)
    first_step = None
    while proc.poll() is None and first_step is None:
        time.sleep(0.05)
        if len(raw_steps(run)) > kills[-1]["lines"]:
            first_step = time.time() - kills[-1]["at"]
    out = cli.finish(proc)
    (restart,) = events(run, "restart")
    (shrink,) = events(run, "shrink")
    print(f"\nshrink: detected {shrink['failed_at'] - kills[-1]['at']:.2f} s after the 2nd kill, first step "
          f"on one node {first_step and round(first_step, 2)} s after it, {shrink['steps_lost']} steps lost")
    assert restart["node"] == 1 and shrink["node"] == 1
    assert (shrink["dp_from"], shrink["dp_to"], shrink["nodes_from"], shrink["nodes_to"]) == (2, 1, 2, 1)
    assert shrink["grad_accum"] == 2 and "data parallel 2 -> 1" in out
    frozen = (run / "config.yaml").read_text()
    assert "dp: 1" in frozen and "num_nodes: 1" in frozen and "grad_accum: 2" in frozen
    assert json.loads((run / "summary.json").read_text())["global_step"] == STEPS
    mine = losses(run)
    assert sorted(mine) == list(range(1, STEPS + 1))
    s = shrink["resume_step"]
    before = {k: v for k, v in reference["losses"].items() if k <= s}
    assert {k: v for k, v in mine.items() if k <= s} == before


def test_a_corrupt_newest_checkpoint_the_restart_falls_back_to_the_previous_verified_one(cli, reference):
    """Bytes of the newest checkpoint flipped, then node 1 killed: the restarted ranks find its
    sha256 differs from its manifest, quarantine it (a `fallback` event) and resume from the one
    before; the steps since that one run again and the run ends as if uninterrupted."""
    from pretrain.launch.faults import corrupt_newest
    run = cli.cwd / "corrupt"
    proc = cli.start(str(run), *NODES, "resilience.max_restarts=2")
    corrupted = None
    while proc.poll() is None and corrupted is None:
        time.sleep(0.05)
        if len(train_steps(run)) >= 8:
            last = max(train_steps(run))
            corrupted = corrupt_newest(run / "checkpoints")
            if corrupted is None:
                continue
            for pid in node_tree(run, 1)[1]:
                tree.sigkill(pid)
    cli.finish(proc)
    (restart,) = events(run, "restart")
    (fallback,) = events(run, "fallback")
    (resumed,) = events(run, "resume")
    print(f"\nnewest checkpoint (step {corrupted}) corrupt: resumed from step {resumed['step']}, "
          f"{last - resumed['step']} steps lost (the controller counted from the newest: "
          f"{restart['steps_lost']})")
    assert fallback["step"] == corrupted and "sha256" in fallback["reason"]
    assert resumed["step"] < corrupted and fallback["resumes_from"] == Path(resumed["path"]).name
    assert (run / "checkpoints" / "quarantine" / f"step_{corrupted:08d}").is_dir()
    assert losses(run) == reference["losses"]
    ranks = status(run)
    assert ranks[0]["params_sha256"] == ranks[1]["params_sha256"] == reference["params"]


def test_disk_full_during_a_save_stops_the_run_with_one_line_and_the_same_command_resumes(cli, reference):
    """The checkpoints on a 128 MB tmpfs of their own, filled after a few saves: the next save fails
    with ENOSPC, nothing half-written is published (every checkpoint left verifies, no temporary
    directory stays), and the run stops with one `error:` line and exit 2, which a restart cannot
    help (the controller does not retry it). Space freed, the same command resumes and the run
    ends as if uninterrupted."""
    from pretrain.launch.faults import BALLAST, checkpoint_fs, fill
    from pretrain.resilience.checkpoint import CheckpointManager, verify
    run = cli.cwd / "diskfull"
    ckpts = checkpoint_fs(run, size_mb=128)   # room for the run's 10 checkpoints of ~7 MB
    try:
        proc = cli.start(str(run), *NODES, "resilience.max_restarts=2")
        filled = None
        while proc.poll() is None and filled is None:
            time.sleep(0.05)
            if len(train_steps(run)) >= 7:
                filled = {"at": max(train_steps(run)), "bytes": fill(ckpts)}
        proc.wait(timeout=600)
        out = cli.out.read_text(errors="replace")
        assert proc.returncode == 2, out[-3000:]
        (line,) = [ln for ln in out.splitlines() if ln.startswith("error:")]
        assert "No space left on device" in line and "nothing was published" in line, line
        assert events(run, "restart") == []
        print(f"\ndisk full at step {filled['at']}: {line[:300]}")
        saved = CheckpointManager(ckpts, keep_latest=50, writes_run_files=False).list()
        assert saved and all(verify(info.path) is None for info in saved)
        assert not [p for p in ckpts.iterdir() if p.name.startswith(".tmp-")]
        (ckpts / BALLAST).unlink()
        cli.finish(cli.start(str(run), *NODES, "resilience.max_restarts=2"))
    finally:
        subprocess.run(["umount", "-l", str(ckpts)], check=False)
    (resumed,) = events(run, "resume")
    assert resumed["step"] == saved[0].step
    assert losses(run) == reference["losses"]
    ranks = status(run)
    assert ranks[0]["params_sha256"] == ranks[1]["params_sha256"] == reference["params"]


def test_node_1_stopped_whole_is_reported_as_node_1_timing_out_and_every_node_restarts(cli, reference):
    run = cli.cwd / "frozen"
    proc, frozen = at_step_7_node_1(cli, run, lambda pid: os.kill(pid, signal.SIGSTOP))
    out = cli.finish(proc)
    (restart,) = events(run, "restart")
    print(f"\nnode 1 stopped: detected {restart['failed_at'] - frozen['at']:.2f} s later: "
          f"{restart['cause'][:90]}")
    assert (restart["node"], restart["rank"], restart["fault"]) == (1, 1, "timeout")
    assert restart["cause"].startswith("node 1 (rank 1) timed out: msrun's scheduler heard no heartbeat")
    assert "port was taken" not in out and "restart 1/2" in out
    assert not tree.tagged([frozen["tag"]])   # the stopped tree was killed, not left stopped
    assert losses(run) == reference["losses"]


def test_a_killed_controllers_namespaces_are_removed_by_its_orphan_watch_once_the_ranks_stopped(cli):
    from pretrain.launch.netns import Namespaces
    run = cli.cwd / "orphaned"
    proc = cli.start(str(run), *NODES)
    while proc.poll() is None and len(train_steps(run)) < 5:
        time.sleep(0.05)
    tags = [node_tree(run, r)[0] for r in (0, 1)]
    ns = Namespaces(run, 2)
    names = [f"{ns.tag}-sw", ns.name(0), ns.name(1)]
    assert all(Path("/run/netns", n).exists() for n in names)
    os.kill(proc.pid, signal.SIGKILL)   # the controller alone (the nodes run in sessions of their own)
    proc.wait()
    deadline = time.time() + 120
    try:
        while time.time() < deadline and any(Path("/run/netns", n).exists() for n in names):
            time.sleep(0.2)
        assert not any(Path("/run/netns", n).exists() for n in names), "they outlived the controller"
    finally:
        ns.destroy()   # for a next run of this test, had they stayed
    assert not tree.tagged(tags)
    (stopped,) = events(run, "signal")   # the ranks stopped by themselves, at a checkpoint
    assert (run / "checkpoints" / f"step_{stopped['step']:08d}").is_dir()
    assert [status(run)[r]["exit"] for r in (0, 1)] == [0, 0]
    assert "removed the network namespaces" in (run / "logs" / "netns.log").read_text()
