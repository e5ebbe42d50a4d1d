#!/usr/bin/env bash
# One node of a run: msrun starts LOCAL_WORKER_NUM ranks of `python -m pretrain.worker RUN_DIR` (ranks
# NODE_RANK*LOCAL_WORKER_NUM .. +LOCAL_WORKER_NUM-1 of WORKER_NUM), each reading the frozen
# RUN_DIR/config.yaml (ranks never run Hydra). The node at MASTER_ADDR also runs msrun's scheduler.
# Start it on every node within CLUSTER_TIME_OUT seconds of each other, from the directory the run
# was composed in (the config's relative paths, e.g. the data cache, are relative to it).
# SIGTERM (from the job controller through srun, or by hand) goes on to this node's ranks: they
# checkpoint at the next step, all ranks of the job at the same one, and exit 0.
# By hand:  WORKER_NUM=64 LOCAL_WORKER_NUM=8 NODE_RANK=0 MASTER_ADDR=10.0.0.1 launchers/msrun_node.sh runs/x
# `python -m pretrain hardware=<multi-node>` writes ready-made per-node callers into RUN_DIR/launch/.
set -euo pipefail
RUN_DIR=${1:?usage: msrun_node.sh RUN_DIR}
: "${WORKER_NUM:?total ranks of the job}" "${LOCAL_WORKER_NUM:?ranks on this node}" "${NODE_RANK:?the rank of this node}"
stopping=""
stop_ranks() {   # msrun's workers run in sessions of their own: signal them by the pids they left
  stopping=1
  for ((r = NODE_RANK * LOCAL_WORKER_NUM; r < (NODE_RANK + 1) * LOCAL_WORKER_NUM; r++)); do
    pid_file="$RUN_DIR/logs/rank_$r.pid"
    if [[ -f "$pid_file" ]]; then kill -TERM "$(cat "$pid_file")" 2>/dev/null || true; fi
  done
}
trap stop_ranks TERM
# PHASES (space-separated, set by the node scripts for train.engine=mindformers): one msrun per
# phase, in order, since MindFormers' trainer runs once per process; empty: one msrun (our loop
# chains the phases itself).
for phase in ${PHASES:-all}; do
  [[ -n "${PHASES:-}" ]] || phase=""
  msrun --worker_num="$WORKER_NUM" --local_worker_num="$LOCAL_WORKER_NUM" \
    --master_addr="${MASTER_ADDR:-127.0.0.1}" --master_port="${MASTER_PORT:-8118}" \
    --node_rank="$NODE_RANK" --log_dir="$RUN_DIR/logs" --join=True \
    --cluster_time_out="${CLUSTER_TIME_OUT:-600}" \
    python -m pretrain.worker "$RUN_DIR" ${phase:+"$phase"} &
  msrun_pid=$!
  rc=""
  while [[ -z "$rc" ]]; do
    wait "$msrun_pid" && rc=0 || rc=$?
    # a trapped TERM ends the wait while msrun runs on: wait again
    if [[ $rc -gt 128 ]] && kill -0 "$msrun_pid" 2>/dev/null; then rc=""; fi
  done
  [[ $rc -eq 0 ]] || exit "$rc"
  [[ -z "$stopping" ]] || break   # stopped at a checkpoint: the later phases run on the next start
done
