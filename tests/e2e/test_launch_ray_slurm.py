"""The Ray-on-Slurm data step (launchers/ray_slurm.sbatch and the submit_ray_data.sh the node-script
writer puts beside it), run against stand-ins for srun / scontrol / ray / python / sbatch that
record what they were asked to do: the head starts before the workers, the workers join the
head's address, the data step runs on that cluster, and the cluster is stopped however the data
step ends."""

import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers.repo import REPO
from tests.helpers.launch_stand_ins import BIG, RECORDER, RUN

SRUN = """#!/usr/bin/env bash
# stand-in for srun: runs the step on the node given by -w (here, on this host), as Slurm would there
node=""
while [[ "$1" == -* ]]; do
  case "$1" in -w) node=$2; shift 2 ;; -w*) node=${1#-w}; shift ;; *) shift ;; esac
done
echo "srun -w $node $*" >> "$RECORD"
SLURMD_NODENAME=$node exec "$@"
"""
RAY = """#!/usr/bin/env bash
# stand-in for ray: `start ... --block` records itself and blocks until signalled (then records the
# stop); `status` lists the started nodes as Ray does, once the head is up (a worker joins only then)
case "$1" in
  start)
    echo "ray start on $SLURMD_NODENAME: $*" >> "$RECORD"
    if [[ " $* " == *" --head "* || -f "$RECORD.node.n-a" ]]; then touch "$RECORD.node.$SLURMD_NODENAME"; fi
    trap 'echo "ray stopped on $SLURMD_NODENAME" >> "$RECORD"; exit 0' TERM
    while true; do sleep 0.05; done ;;
  status)
    [[ -f "$RECORD.node.n-a" ]] || exit 1
    echo "Active:"
    for f in "$RECORD".node.*; do echo " 1 node_${f##*.}"; done ;;
  *) echo "ray $*" >> "$RECORD" ;;
esac
"""
PYTHON = """#!/usr/bin/env bash
# stand-in for the data step: records its arguments, exits with $DATA_EXIT
echo "python $*" >> "$RECORD"
exit "${DATA_EXIT:-0}"
"""


@pytest.fixture
def slurm(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in [("srun", SRUN), ("ray", RAY), ("python", PYTHON),
                       ("sbatch", RECORDER.format(name="sbatch")),
                       ("scontrol", "#!/usr/bin/env bash\nprintf 'n-a\\nn-b\\nn-c\\n'\n")]:
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    record = tmp_path / "record.txt"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "RECORD": str(record),
           "SLURM_JOB_NUM_NODES": "3", "SLURM_JOB_NODELIST": "n-[a-c]", "RAY_HEAD_IP": "10.0.0.1",
           "RAY_PORT": "6390"}

    def run(script: Path, *args, data_exit=0):
        proc = subprocess.run(["bash", str(script), *args], env={**env, "DATA_EXIT": str(data_exit)},
                              cwd=tmp_path, capture_output=True, text=True, timeout=60)
        return proc, record.read_text().splitlines() if record.is_file() else []
    return run


def _check_cluster_run(lines, data_args):
    head = "ray start on n-a: start --head --port=6390 --block"
    assert lines[1] == head, lines                 # (after its srun line) the head first ...
    workers = [ln for ln in lines if ln.startswith("ray start on n-") and ln != head]
    assert sorted(workers) == [f"ray start on n-{n}: start --address=10.0.0.1:6390 --block" for n in "bc"]
    assert [i for i, ln in enumerate(lines) if ln in workers] > [1]     # ... the workers after it
    (data,) = [ln for ln in lines if ln.startswith("python ")]
    assert data == f"python -m pretrain.data {data_args}data.engine=ray data.ray.address=10.0.0.1:6390"
    stopped = [ln for ln in lines if ln.startswith("ray stopped")]
    assert sorted(stopped) == [f"ray stopped on n-{n}" for n in "abc"]      # every node's Ray stopped
    assert lines.index(data) < min(lines.index(s) for s in stopped)


@pytest.mark.slow   # moved out of the default suite's 5 minutes (still run by CI)
@pytest.mark.parametrize("data_exit", [0, 3])
def test_the_data_step_runs_on_a_ray_cluster_across_the_allocation(slurm, data_exit):
    script = REPO / "launchers" / "ray_slurm.sbatch"
    proc, lines = slurm(script, "data=files", "data.sources.general.paths=[/data/web]", data_exit=data_exit)
    assert proc.returncode == data_exit, proc.stderr        # the data step's status is the job's
    _check_cluster_run(lines, "data=files data.sources.general.paths=[/data/web] ")
    assert "ray cluster stopped (3 nodes)" in proc.stdout


@pytest.mark.slow   # moved out of the default suite's 5 minutes (still run by CI)
def test_node_scripts_submit_the_data_step_with_the_runs_own_overrides(cli, tmp_path, slurm):
    cli(*BIG, "data.engine=local", "data.workers=3", check=True)
    launch = tmp_path / RUN / "launch"
    assert (launch / "ray_slurm.sbatch").is_file()
    proc, lines = slurm(launch / "submit_ray_data.sh", "--parsable")
    assert proc.returncode == 0, proc.stderr
    (submit,) = lines
    assert submit.startswith(f"sbatch NODE_RANK= PWD={tmp_path} --nodes=8 --chdir={tmp_path} --parsable ")
    # the run's overrides, less data.engine (the batch script sets it)
    assert submit.endswith(f"{launch / 'ray_slurm.sbatch'} {' '.join(BIG)} data.workers=3")

    # the batch script as Slurm runs its spooled copy, with those overrides
    for f in tmp_path.glob("record.txt*"):
        f.unlink()
    proc, lines = slurm(launch / "ray_slurm.sbatch", *BIG, "data.workers=3", data_exit=1)
    assert proc.returncode == 1
    _check_cluster_run(lines, " ".join(BIG) + " data.workers=3 ")
