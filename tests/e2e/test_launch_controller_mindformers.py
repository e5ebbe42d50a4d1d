"""The job controller around MindFormers' engine (train.engine=mindformers: one msrun per phase),
under Slurm stand-ins (tests/test_launch_controller_slurm.py's srun and scontrol). MindFormers'
trainer cannot run model-parallel on CPU, so each node's msrun is a stand-in: node 0's loads the
phase's real MindFormers config the way a rank does (pretrain.engine.mindformers.phase_config,
real MindFormerConfig) and records what it would resume from, then plays every rank's
CheckpointMonitor (a real safetensors file with step_num per rank and save, meta.json written
after it) and PretrainLossLog (losses.jsonl); node 1's ranks end with node 0's or fail on cue.

- node 1 fails mid-phase 2: every node restarts; the relaunched phase 2 resumes from its own
  newest checkpoint with data skip, phase 1 (finished) is not run again, phase 3 starts from
  phase 2's final checkpoint; the restart event counts the phase's steps lost;
- one restart budget for all phases: a failure in phase 1 and one in phase 2 spend
  resilience.max_restarts=1 and the job gives up (75).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.repo import REPO
from tests.helpers.launch_stand_ins import BIG, RUN, SCONTROL, SLURM_SRUN, events

pytestmark = pytest.mark.slow

MSRUN = """#!/usr/bin/env bash
# stand-in for one node's msrun of MindFormers' engine (the phase: the last argument)
log_dir=""; for a in "$@"; do case "$a" in --log_dir=*) log_dir=${a#--log_dir=} ;; esac; done
echo "msrun NODE_RANK=$NODE_RANK $*" >> "$RECORD"
exec "$PYTHON" "$STANDIN" "${@: -2:1}" "${@: -1}" "$NODE_RANK" "$LOCAL_WORKER_NUM" "$WORKER_NUM"
"""
NODE = '''
import json, os, sys, time
from pathlib import Path
run_dir, phase = Path(sys.argv[1]), sys.argv[2]
node, per_node, world = map(int, sys.argv[3:6])
logs, record = run_dir / "logs", os.environ["RECORD"]
mine = range(node * per_node, (node + 1) * per_node)
for r in mine:
    (logs / f"rank_{r}.pid").write_text(str(os.getpid()))
def finish(code):
    for r in mine:
        (logs / f"rank_{r}.exit").write_text(json.dumps({"rank": r, "exit": code, "error": ""}))
    sys.exit(code)
log = run_dir / "mindformers" / phase / "losses.jsonl"
starts = sum(1 for ln in open(record)
             if ln.startswith(f"msrun NODE_RANK={node} ") and ln.endswith(f" {phase}\\n"))
faults = [f.split(":") for f in os.environ.get("FAULT", "").split(",") if f]   # phase:node:step:times
if node != 0:   # its ranks end with node 0's, or fail once rank 0 logged the step (FAULT)
    while True:
        done = logs / "rank_0.exit"
        if done.is_file():
            finish(json.loads(done.read_text())["exit"])
        rows = log.read_text().splitlines() if log.is_file() else []
        for f_phase, f_node, f_step, f_times in faults:
            if (f_phase, int(f_node)) == (phase, node) and starts <= int(f_times) and rows \\
                    and json.loads(rows[-1])["step"] >= int(f_step):
                finish(137)
        time.sleep(0.02)
from pretrain.engine import phases as P
from pretrain.engine.mindformers import newest_checkpoint_step, phase_config
config = phase_config(run_dir, phase)
own = P.checkpoint_dir(run_dir, phase)
start = newest_checkpoint_step(own)
with open(record, "a") as fh:
    fh.write("config " + json.dumps({"phase": phase, "load_checkpoint": str(config.load_checkpoint),
                                     "resume_training": config.resume_training,
                                     "ignore_data_skip": config.ignore_data_skip, "start": start}) + "\\n")
import mindspore as ms
every = [c for c in config.callbacks if c["type"] == "CheckpointMonitor"][0]["save_checkpoint_steps"]
steps = int(config.pretrain_phase.steps)
log.parent.mkdir(parents=True, exist_ok=True)
for s in range(start + 1, steps + 1):
    with open(log, "a") as fh:
        fh.write(json.dumps({"step": s, "loss": 1.0, "time": time.time()}) + "\\n")
    if s % every == 0 or s == steps:
        for r in range(world):
            d = own / f"rank_{r}"
            d.mkdir(parents=True, exist_ok=True)
            name = f"llama3_70b_rank_{r}-1_{s - start}.safetensors"
            ms.save_checkpoint([{"name": "step_num", "data": ms.Tensor(s, ms.int32)}], str(d / name),
                               format="safetensors")
            (d / "meta.json").write_text(json.dumps({"last_epoch": 1, "last_step": s - start,
                                                      "last_ckpt_file": name}))
    time.sleep(0.05)
finish(0)
'''


@pytest.fixture
def mf(tmp_path):
    """A frozen 2-node run of MindFormers' engine, three phases (50, 14, 7 steps; a save every 5),
    resilience.max_restarts=1,
    and the stand-ins; start(**env) runs launchers/slurm.sbatch on it."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    subprocess.run([sys.executable, "-m", "pretrain", *BIG, "train.total_tokens=600000000",
                    "train.save_every_steps=5", "resilience.max_restarts=1"], cwd=cwd, env=env, check=True,
                   capture_output=True, timeout=300)
    run_dir = cwd / RUN
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in [("srun", SLURM_SRUN), ("msrun", MSRUN), ("scontrol", SCONTROL)]:
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "node.py").write_text(NODE)
    record = tmp_path / "record.txt"
    record.touch()
    env.update(PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", RECORD=str(record), SLURM_JOB_NUM_NODES="2",
               SLURM_JOB_NODELIST="n-[a-b]", SLURM_JOB_ID="42", SLURM_SUBMIT_DIR=str(cwd),
               PYTHON=sys.executable, STANDIN=str(tmp_path / "node.py"), LOCAL_WORKER_NUM="2",
               PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]))

    def start(**extra):
        return subprocess.run(["bash", str(run_dir / "launch" / "slurm.sbatch"), str(run_dir)],
                              env={**env, **extra}, cwd=cwd, capture_output=True, text=True, timeout=600)

    def lines(prefix):
        return [ln[len(prefix) + 1:] for ln in record.read_text().splitlines() if ln.startswith(prefix + " ")]
    return run_dir, start, lines


def planned(run_dir: Path, phase: str) -> int:
    from omegaconf import OmegaConf
    return int(OmegaConf.load(run_dir / f"mindformers_{phase}.yaml").pretrain_phase.steps)


def steps_of(run_dir: Path, phase: str):
    return [json.loads(ln)["step"] for ln in (run_dir / "mindformers" / phase / "losses.jsonl").read_text()
            .splitlines()]


def test_a_node_lost_mid_phase_restarts_that_phase_from_its_newest_checkpoint_not_the_finished_ones(mf):
    run_dir, start, lines = mf
    done = start(FAULT="reasoning:1:8:1")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    configs = [json.loads(c) for c in lines("config")]
    assert [c["phase"] for c in configs] == ["general", "reasoning", "reasoning", "anneal"]
    general, first, again, anneal = configs
    ckpt = str(run_dir.resolve() / "mindformers" / "{}" / "checkpoint")
    assert (general["load_checkpoint"], general["resume_training"]) == ("", False)
    # a new phase: the previous phase's final checkpoint, its own data from the first sample
    assert (first["load_checkpoint"], first["resume_training"], first["ignore_data_skip"]) == \
        (ckpt.format("general"), True, True) and first["start"] == 0
    # the relaunched phase: its own newest checkpoint (step 5 or 10), with data skip
    assert (again["load_checkpoint"], again["resume_training"], again["ignore_data_skip"]) == \
        (ckpt.format("reasoning"), True, False)
    assert again["start"] in (5, 10)
    assert (anneal["load_checkpoint"], anneal["ignore_data_skip"]) == (ckpt.format("reasoning"), True)
    (restart,) = events(run_dir, "restart")
    assert restart["node"] == 1 and restart["exit"] == 137
    assert restart["resume_step"] == again["start"]
    assert restart["steps_lost"] == restart["last_step"] - again["start"] and restart["last_step"] >= 8
    # phase general ran once (one msrun per node), reasoning twice, anneal once
    msruns = [ln.split()[-1] for ln in lines("msrun")]
    assert sorted(msruns) == sorted(["general"] * 2 + ["reasoning"] * 4 + ["anneal"] * 2)
    assert steps_of(run_dir, "general") == list(range(1, planned(run_dir, "general") + 1))
    n = planned(run_dir, "reasoning")
    assert steps_of(run_dir, "reasoning")[-(n - again["start"]):] == list(range(again["start"] + 1, n + 1))
    print(f"\nmindformers phases under the controller: node 1 lost at reasoning step "
          f"{restart['last_step']}, resumed from its step {again['start']} ({restart['steps_lost']} steps "
          f"lost); general not rerun")


def test_one_restart_budget_covers_every_phase(mf):
    """resilience.max_restarts=1 for the job: phase general's failure spends it, so phase reasoning's
    gives up (a budget per phase would have restarted it)."""
    run_dir, start, lines = mf
    done = start(FAULT="general:1:3:1,reasoning:1:3:1")
    assert done.returncode == 75, done.stdout[-3000:] + done.stderr[-3000:]
    assert "resilience.max_restarts=1 restarts within resilience.restart_window=3600 s are spent" \
        in done.stderr
    (restart,) = events(run_dir, "restart")
    assert restart["node"] == 1 and "general" in [ln.split()[-1] for ln in lines("msrun")][0]
    assert [json.loads(c)["phase"] for c in lines("config")] == ["general", "general", "reasoning"]
