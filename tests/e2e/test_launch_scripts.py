"""Multi-node launch scripts and dry runs: what each node would start, checked by running the
generated scripts with stand-ins for msrun / sbatch / srun / scontrol that record their arguments."""

import os
import re
import stat
import subprocess

import pytest

from tests.helpers.launch_stand_ins import BIG, RECORDER, RUN

SRUN = """#!/usr/bin/env bash
# stand-in for srun: runs the task once per node, as Slurm would on each node
while [[ "$1" == --* ]]; do shift; done
for ((node = 0; node < SLURM_JOB_NUM_NODES; node++)); do SLURM_NODEID=$node SLURM_PROCID=$node "$@"; done
"""


@pytest.fixture
def stand_ins(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in [("msrun", RECORDER.format(name="msrun")), ("sbatch", RECORDER.format(name="sbatch")),
                       ("srun", SRUN), ("scontrol", "#!/usr/bin/env bash\nprintf 'n-%s\\n' a b c d e f g h\n")]:
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    record = tmp_path / "record.txt"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "RECORD": str(record)}

    def calls():
        return record.read_text().splitlines() if record.is_file() else []
    return env, calls


def msrun_args(line):
    return dict(re.findall(r"--(\w+)=(\S+)", line))


def test_every_node_script_starts_its_ranks_against_the_master(cli, tmp_path, stand_ins):
    env, calls = stand_ins
    proc = cli(*BIG, "hardware.master_addr=10.1.2.3", "hardware.master_port=29500", check=True)
    launch = tmp_path / RUN / "launch"
    for node in (0, 7):   # (the middle ones are summarised)
        assert f"node {node}: bash {launch / f'node_{node}.sh'}" in proc.stdout
    assert "submit_slurm.sh" in proc.stdout and "is this host's loopback" not in proc.stdout
    assert "engine     mindformers" in proc.stdout and "mindformers_general.yaml" in proc.stdout

    for node in range(8):   # each script run as a node would run it: from anywhere, by path
        subprocess.run(["bash", str(launch / f"node_{node}.sh")], env=env, cwd="/", check=True)
        assert os.stat(launch / f"node_{node}.sh").st_mode & stat.S_IXUSR
    runs = calls()
    phases = ["general", "reasoning", "anneal"]   # MindFormers' engine: one msrun per phase, in order
    assert len(runs) == 8 * len(phases)
    for i, line in enumerate(runs):
        node, phase = divmod(i, len(phases))
        args = msrun_args(line)
        assert args["node_rank"] == str(node) and f"NODE_RANK={node}" in line
        assert (args["worker_num"], args["local_worker_num"]) == ("64", "8")
        assert (args["master_addr"], args["master_port"]) == ("10.1.2.3", "29500")
        assert args["log_dir"] == str(tmp_path / RUN / "logs") and args["join"] == "True"
        assert int(args["cluster_time_out"]) > 0
        assert line.endswith(f"python -m pretrain.worker {tmp_path / RUN} {phases[phase]}")
        assert f"PWD={tmp_path} " in line   # the config's relative paths resolve as at compose time


def test_a_plan_that_does_not_fit_gets_no_node_scripts(cli, tmp_path):
    proc = cli("model=llama3_70b", "parallel=dp8tp4pp2", "hardware=ascend910b_8x8")
    assert proc.returncode == 2 and "GB per device" in proc.stderr
    assert not (tmp_path / "runs" / "llama3_70b-dp8tp4pp2-ascend910b_8x8" / "launch").exists()


@pytest.mark.slow   # 3-5 s each; with the slow suite to keep the default one within 5 minutes (it took 396 s in CI)
def test_slurm_submits_all_nodes_and_each_node_gets_its_rank(cli, tmp_path, stand_ins):
    env, calls = stand_ins
    cli(*BIG, check=True)
    launch = tmp_path / RUN / "launch"
    subprocess.run(["bash", str(launch / "submit_slurm.sh")], env=env, cwd="/", check=True)
    (submit,) = calls()
    assert submit.startswith("sbatch ") and "--nodes=8" in submit and "LOCAL_WORKER_NUM=8" in submit
    assert "PHASES=general reasoning anneal" in submit
    assert submit.endswith(f"{launch / 'slurm.sbatch'} {tmp_path / RUN}")

    # the batch script as Slurm runs it on an allocation of 8 nodes (first host: n-a)
    slurm_env = {**env, "SLURM_JOB_NUM_NODES": "8", "SLURM_JOB_NODELIST": "n-[a-h]", "LOCAL_WORKER_NUM": "8",
                 "SLURM_SUBMIT_DIR": str(tmp_path), "PHASES": "general"}   # as sbatch --export passes it
    subprocess.run(["bash", str(launch / "slurm.sbatch"), str(tmp_path / RUN)], env=slurm_env, cwd=tmp_path, check=True)
    nodes = [msrun_args(line) for line in calls()[1:]]
    # MindFormers' engine: one launch of every node per phase, in order
    assert [a["node_rank"] for a in nodes] == [str(n) for n in range(8)] * 3
    assert [line.split()[-1] for line in calls()[1:]] == ["general"] * 8 + ["reasoning"] * 8 + ["anneal"] * 8
    assert all(a["master_addr"] == "n-a" and a["worker_num"] == "64" and a["local_worker_num"] == "8" for a in nodes)


@pytest.mark.slow   # 3-5 s each; with the slow suite to keep the default one within 5 minutes (it took 396 s in CI)
def test_launcher_print_and_dry_run_say_what_would_run_and_start_nothing(cli, tmp_path, stand_ins):
    env, calls = stand_ins
    proc = cli("parallel=dp2", "hardware=cpu_2proc", "launcher=print", "hardware.master_port=29501",
               env={"PATH": env["PATH"], "RECORD": env["RECORD"]}, check=True)
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("would run:")]
    args = msrun_args(line)
    assert (args["worker_num"], args["local_worker_num"], args["master_port"]) == ("2", "2", "29501")
    assert line.endswith("python -m pretrain.worker " + str(tmp_path / "runs" / "tiny-dp2-cpu_2proc"))
    assert calls() == [] and not (tmp_path / "runs" / "tiny-dp2-cpu_2proc" / "logs").exists()

    proc = cli(*BIG, "dry_run=true", check=True)
    assert "would write 8 node scripts" in proc.stdout and not (tmp_path / RUN / "launch").exists()
    shown = re.findall(r"node (\d+): msrun .*--node_rank=(\d+)", proc.stdout)
    assert shown and all(a == b for a, b in shown) and shown[-1] == ("7", "7")
    assert "note: hardware.master_addr=127.0.0.1" in proc.stdout   # the loopback default cannot span nodes

    assert "would run: in this process" in cli("dry_run=true", check=True).stdout
