"""The job controller under Slurm (launchers/slurm.sbatch -> python -m pretrain.launch.controller),
run against stand-ins: srun runs its task once per node here (in parallel, reporting a failed task
as Slurm does), scontrol names the hosts and records requeues, and msrun plays one node's ranks
(each leaves the pid and exit files pretrain.worker would) with a scripted fault.

- a node that fails once: every node is started again, on a fresh port, with a `restart` event
  naming that node; the job ends 0;
- a rank's user error (exit 2) is not retried; a node that fails every time spends the budget: 75;
- SIGUSR1 (`--signal=B:USR1@90`): every node's ranks get SIGTERM (they checkpoint), then the job
  requeues itself and ends 0.
"""
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers import cli
from tests.helpers.launch_stand_ins import BIG, RUN, SCONTROL, SLURM_SRUN, events

MSRUN = """#!/usr/bin/env bash
# stand-in for one node's msrun: its ranks leave pid files, then (FAULT: "node:exit:times") this
# node exits with that code the first `times` starts, or trains until told to stop, or finishes.
log_dir=""; for a in "$@"; do case "$a" in --log_dir=*) log_dir=${a#--log_dir=} ;; esac; done
echo "msrun NODE_RANK=$NODE_RANK launcher=${PRETRAIN_LAUNCHER_PID:-} $*" >> "$RECORD"
starts=$(grep -c "^msrun NODE_RANK=$NODE_RANK " "$RECORD")
IFS=: read -r f_node f_exit f_times <<< "${FAULT:-::}"
first=$((NODE_RANK * LOCAL_WORKER_NUM))
for ((r = first; r < first + LOCAL_WORKER_NUM; r++)); do echo $$ > "$log_dir/rank_$r.pid"; done
finish() {
  for ((r = first; r < first + LOCAL_WORKER_NUM; r++)); do
    echo "{\\"rank\\": $r, \\"exit\\": $1, \\"error\\": \\"\\"}" > "$log_dir/rank_$r.exit"
  done
  exit "$1"
}
if [[ "$f_node" == "$NODE_RANK" && ( "$f_times" == all || $starts -le ${f_times:-0} ) ]]; then
  finish "$f_exit"
fi
if [[ -n "${TRAIN_UNTIL_STOPPED:-}" ]]; then
  # this node's ranks share one pid here, so msrun_node.sh's TERM per rank arrives once per rank:
  # a real rank checkpoints once, so the stand-in records the first only
  trap '[[ -n "${stopped:-}" ]] || { stopped=1; echo "ranks of node $NODE_RANK checkpointed" >> "$RECORD"; finish 0; }' TERM
  while true; do sleep 0.05; done
fi
finish 0
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A frozen multi-node run (node scripts written), composed once; one phase (the controller
    launches the phases not yet finished: with these stand-ins, which save nothing, all of them)."""
    cwd = tmp_path_factory.mktemp("slurm-run")
    cli.run(*BIG, "phase=general", "resilience.max_restarts=2", cwd=cwd, timeout=300, check=True)
    return cwd / RUN


@pytest.fixture(scope="module")
def dp_run_dir(tmp_path_factory):
    """A frozen 2-node data-parallel run (1 CPU process per node), node scripts only."""
    cwd = tmp_path_factory.mktemp("slurm-dp-run")
    cli.run("parallel=dp2", "hardware=cpu_2x1", "hardware.nodes_on_this_host=false", "phase=general",
            "resilience.max_restarts=1", "resilience.elastic=true", cwd=cwd, timeout=300, check=True)
    return cwd / "runs" / "tiny-dp2-cpu_2x1"


@pytest.fixture(params=["tp"])
def slurm(tmp_path, request, run_dir, dp_run_dir):
    run_dir = dp_run_dir if request.param == "dp" else run_dir
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in [("srun", SLURM_SRUN), ("msrun", MSRUN), ("scontrol", SCONTROL)]:
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    record = tmp_path / "record.txt"
    for stale in [run_dir / "events.jsonl", *(run_dir / "logs").glob("*")] if (run_dir / "logs").is_dir() \
            else [run_dir / "events.jsonl"]:
        stale.unlink(missing_ok=True)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "RECORD": str(record),
           "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "n-[a-b]", "SLURM_JOB_ID": "42",
           "PHASES": "general", "SLURM_SUBMIT_DIR": str(run_dir.parents[1]),
           "PYTHON": sys.executable}

    def start(**extra):
        extra.setdefault("LOCAL_WORKER_NUM", "1" if request.param == "dp" else "2")
        return subprocess.Popen(["bash", str(run_dir / "launch" / "slurm.sbatch"), str(run_dir)],
                                env={**env, **extra}, cwd=run_dir.parents[1], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def lines():
        return record.read_text().splitlines() if record.is_file() else []
    return start, lines


def ports(lines):
    return [next(a.split("=")[1] for a in ln.split() if a.startswith("--master_port=")) for ln in lines
            if ln.startswith("msrun ")]


def test_a_node_that_fails_once_restarts_every_node_on_a_fresh_port(slurm, run_dir):
    start, lines = slurm
    proc = start(FAULT="1:137:1")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    (restart,) = events(run_dir, "restart")
    assert restart["node"] == 1 and restart["exit"] == 137 and restart["restart"] == 1
    assert restart["cause"].startswith("node 1: rank 2 of 4 exited with code 137") or \
        restart["cause"].startswith("node 1: rank 3 of 4 exited with code 137")
    assert "restart 1/2" in out and "of all 2 nodes" in out
    msruns = [ln for ln in lines() if ln.startswith("msrun ")]
    assert sorted(ln.split()[1] for ln in msruns) == ["NODE_RANK=0"] * 2 + ["NODE_RANK=1"] * 2   # both, twice
    assert all("--master_addr=n-a" in ln and "--worker_num=4" in ln for ln in msruns)
    # the controller's pid means nothing on another host: ranks there must not watch it
    assert all(" launcher= " in ln for ln in msruns)
    first, second = sorted(set(ports(lines())), key=ports(lines()).index)
    assert first != second and str(restart["port"]) == first
    assert f"master_port: {second}" in (run_dir / "config.yaml").read_text()   # the ranks' frozen port


def test_a_user_error_is_not_retried_and_a_node_that_keeps_failing_spends_the_budget(slurm, run_dir):
    start, lines = slurm
    proc = start(FAULT="0:2:all")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and events(run_dir, "restart") == []
    assert len([ln for ln in lines() if ln.startswith("srun ")]) == 1
    (line,) = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert "exited with code 2" in line

    before = len([ln for ln in lines() if ln.startswith("srun ")])
    proc = start(FAULT="1:1:all")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 75, err
    assert len(events(run_dir, "restart")) == 2          # resilience.max_restarts=2, then given up
    assert "resilience.max_restarts=2 restarts within resilience.restart_window=3600 s are spent" in err
    assert len([ln for ln in lines() if ln.startswith("srun ")]) - before == 3


def test_usr1_before_the_time_limit_checkpoints_every_node_and_requeues(slurm, run_dir):
    start, lines = slurm
    proc = start(TRAIN_UNTIL_STOPPED="1")
    deadline = time.time() + 60
    while time.time() < deadline and len(list((run_dir / "logs").glob("rank_*.pid"))) < 4:
        time.sleep(0.05)
    proc.send_signal(signal.SIGUSR1)   # what --signal=B:USR1@90 sends the batch shell (the controller)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert sorted(ln for ln in lines() if "checkpointed" in ln) == \
        ["ranks of node 0 checkpointed", "ranks of node 1 checkpointed"]
    assert "scontrol requeue 42" in lines() and "requeued Slurm job 42" in out
    assert events(run_dir, "restart") == [] and events(run_dir, "requeue")[0]["ok"] is True


@pytest.mark.parametrize("slurm", ["dp"], indirect=True)
def test_elastic_leaves_out_the_host_that_keeps_failing_and_goes_on_with_the_rest(slurm, dp_run_dir):
    start, lines = slurm
    proc = start(FAULT="1:1:all", PHASES="")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    (restart,) = events(dp_run_dir, "restart")   # resilience.max_restarts=1
    (shrink,) = events(dp_run_dir, "shrink")
    assert restart["node"] == shrink["node"] == 1
    assert (shrink["dp_from"], shrink["dp_to"], shrink["nodes_from"], shrink["nodes_to"]) == (2, 1, 2, 1)
    sruns = [ln for ln in lines() if ln.startswith("srun ")]
    assert len(sruns) == 3 and "--nodes=2 --nodelist=n-a,n-b" in sruns[0]
    assert "--nodes=1 --nodelist=n-a " in sruns[2]
    last = [ln for ln in lines() if ln.startswith("msrun ")][-1]
    assert "NODE_RANK=0" in last and "--worker_num=1" in last and "--master_addr=n-a" in last
    assert "dp: 1" in (dp_run_dir / "config.yaml").read_text() and "going on with 1 node(s)" in out
