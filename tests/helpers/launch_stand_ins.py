"""What the launch tests run the generated launch scripts against: a large layout that fits (its run
dir), and stand-ins for msrun / sbatch / srun / scontrol that record their arguments in $RECORD."""
import json
from pathlib import Path

BIG = ["model=llama3_70b", "parallel=dp4tp8pp2", "hardware=ascend910b_8x8"]   # fits; MindFormers' engine
RUN = Path("runs") / "llama3_70b-dp4tp8pp2-ascend910b_8x8"

RECORDER = """#!/usr/bin/env bash
# stand-in for {name}: records its environment's node rank and its arguments
echo "{name} NODE_RANK=${{NODE_RANK:-}} PWD=$PWD $*" >> "$RECORD"
"""
# the Slurm job controller's stand-ins (test_launch_controller_slurm.py, _mindformers.py)
SLURM_SRUN = """#!/usr/bin/env bash
# stand-in for srun: the task once per node of the allocation, in parallel; SIGTERM passed on
echo "srun $*" >> "$RECORD"
nodes=$SLURM_JOB_NUM_NODES
while [[ "$1" == --* ]]; do case "$1" in --nodes=*) nodes=${1#--nodes=} ;; esac; shift; done
pids=()
for ((task = 0; task < nodes; task++)); do SLURM_PROCID=$task "$@" & pids+=($!); done
trap 'kill -TERM "${pids[@]}" 2>/dev/null' TERM
rc=0
for i in "${!pids[@]}"; do
  while true; do
    wait "${pids[$i]}" && code=0 || code=$?
    if [[ $code -gt 128 ]] && kill -0 "${pids[$i]}" 2>/dev/null; then continue; fi
    break
  done
  if [[ $code -ne 0 ]]; then echo "srun: error: n-$i: task $i: Exited with exit code $code" >&2; rc=$code; fi
done
exit $rc
"""
SCONTROL = """#!/usr/bin/env bash
case "$1" in
  show) printf 'n-a\\nn-b\\n' ;;
  *) echo "scontrol $*" >> "$RECORD" ;;
esac
"""


def events(run_dir: Path, kind: str):
    path = run_dir / "events.jsonl"
    if not path.is_file():
        return []
    return [e for e in map(json.loads, path.read_text().splitlines()) if e["kind"] == kind]
