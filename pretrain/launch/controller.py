"""The job controller: every node of a multi-node job started, watched, and restarted together.

msrun has no restart loop, and a node cannot rejoin a running MindSpore cluster (that needs
MS_ENABLE_RECOVERY, Ascend/MindX only): after any node's failure the other nodes' workers fail
too, once the scheduler's heartbeat timeout passes. So a restart is the whole job's. Each
generation starts every node's process tree (RUN_DIR/launch/node_<r>.sh: bash, msrun, its
scheduler and `tail -f`, the workers msrun setsid()s) on a fresh master port; the controller
watches the ranks' files in RUN_DIR/logs/ (pretrain.launch.msrun.RankWatch: a non-zero exit, a
rank gone without one), each node's own process (a node agent gone is a lost node), msrun's
scheduler (a node stopped or frozen: no heartbeat for ~30 s, it names the node), and the run's
progress (no new line in metrics.jsonl within resilience.watchdog_timeout_s plus a margin: a rank
stopped or stuck where its own watchdog cannot fire). On a failure it stops every node's whole
tree, then starts the next generation from the newest verified checkpoint, within
resilience.max_restarts / restart_window (pretrain.launch.supervise), logging a `restart` event
with the cause, node, exit and steps lost; a user error (exit 2) is not retried.

MindFormers' engine (train.engine=mindformers) trains one phase per launch (its Trainer runs once
per process): each generation starts the first phase not yet finished (its own newest checkpoint
short of the phase's steps, pretrain.engine.mindformers.unfinished), so a finished phase never
runs again, and one restart budget covers all phases. A relaunched phase resumes from its own
newest checkpoint (pretrain.engine.mindformers.phase_config: load_checkpoint = the phase's
checkpoint directory, resume_training, data skip); MindFormers 1.9.0 then loads the checkpoint
every rank's meta.json names (the oldest of them: tools/resume_ckpt.py), and meta.json names a
file only once it is complete.

Where the nodes run:
- `LocalNodes`: all on this host (hardware.nodes_on_this_host, e.g. hardware=cpu_2x1), each in a
  network namespace of its own (pretrain.launch.netns; why: there), which a janitor process
  removes should the controller be killed.
- `SlurmNodes`: one `srun` task per node of the allocation (launchers/slurm.sbatch runs
  `python -m pretrain.launch.controller RUN_DIR` on its first node); Slurm's step cleanup ends
  each node's tree. SIGUSR1 (`#SBATCH --signal=B:USR1@90`, before the time limit) stops the ranks
  at a checkpoint and requeues the job.
"""
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from omegaconf import DictConfig, OmegaConf

from pretrain import rundir
from pretrain.config.errors import USER_ERRORS, PretrainRunError
from pretrain.config.layout import ParallelLayout
from pretrain.config.resolved import ResolvedRun
from pretrain.launch import compile_cache, msrun, supervise
from pretrain.launch.launches import remaining_launches
from pretrain.launch.netns import Namespaces
from pretrain.launch.scripts import write_node_scripts
from pretrain.launch.supervise import Failure
from pretrain.launch.tree import TAG_ENV, kill_tagged, new_tag, sigkill
from pretrain.resilience.orphan import LAUNCHER_ENV
from pretrain.resilience.signals import StopForced

STALL_MARGIN_S = 30.0   # past the ranks' own watchdog: they report a hang better when they can
STOP_WAIT_S = 15.0
NODE_SETTLE_S = 0.5     # a node's tree dies one process at a time: its ranks' own word comes first


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class NodeHeads:
    """Each node's head process of one generation (its node_<r>.sh), as the watcher sees them. A
    tree killed process by process ends its head first, before the rank it ran: a head that ended
    with an error counts only NODE_SETTLE_S later, so the ranks' own word (an exit status, a pid
    found dead) names the rank that failed, not the lowest rank that had not reported yet."""

    def __init__(self, procs: List[subprocess.Popen], logs: Path) -> None:
        self.procs, self.logs = procs, logs
        self._ended_at: Dict[int, float] = {}   # node -> when its head was first seen ended badly

    def _settled(self, r: int, code: Optional[int]) -> bool:
        if code in (None, 0):
            return False
        return time.monotonic() - self._ended_at.setdefault(r, time.monotonic()) >= NODE_SETTLE_S

    def failed(self) -> Optional[Failure]:
        """A node whose head ended with an error and whose ranks did not say why within NODE_SETTLE_S."""
        for r, p in enumerate(self.procs):
            if self._settled(r, p.poll()):
                log = self.logs / f"node_{r}.log"
                return Failure(-1, p.returncode, f"node {r} of {len(self.procs)}: its msrun exited with code "
                                                 f"{p.returncode} (see {log})", cause="node")
        return None

    def poll(self) -> Optional[int]:
        """0 once every head exited 0; a settled head's error code; else None (still running)."""
        codes = [p.poll() for p in self.procs]
        bad = [c for r, c in enumerate(codes) if self._settled(r, c)]
        return bad[0] if bad else (0 if all(c == 0 for c in codes) else None)


class LocalNodes:
    """Every node's RUN_DIR/launch/node_<r>.sh on this host, each in its own network namespace."""

    def __init__(self, cfg: DictConfig, run_dir: Path):
        self.run_dir, self.n = run_dir, int(cfg.hardware.num_nodes)
        self.per_node = int(cfg.hardware.devices_per_node)
        self.ns = Namespaces(run_dir, self.n)
        self.slots = list(range(self.n))   # node r of the job runs in namespace slots[r]
        self.master_addr = self.ns.address(0)
        self.heads = NodeHeads([], run_dir / "logs")   # this generation's node processes
        self.tags: List[str] = []
        # the ranks stop by themselves within their watchdog's timeout once this controller is gone
        self.orphan_grace_s = float(cfg.resilience.watchdog_timeout_s) + STOP_WAIT_S
        self.janitor: Optional[subprocess.Popen] = None

    def __enter__(self) -> "LocalNodes":
        self.ns.create()
        # removes the namespaces should this controller be killed before __exit__ does
        self.janitor = self.ns.janitor(self.run_dir, os.getpid(), self.orphan_grace_s,
                                       rundir.held_fd(self.run_dir))
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
        if self.janitor is not None:   # first: it holds the run dir's lock, and must not race the removal
            sigkill(self.janitor.pid)
            self.janitor.wait()
        self.ns.destroy()

    def start(self, env: Dict[str, str], lock: Optional[int]) -> None:
        job = new_tag()
        self.heads, self.tags = NodeHeads([], self.run_dir / "logs"), []
        # msrun starts `python` from PATH: make it this interpreter (on a cluster: the job's PATH).
        env = {**env, "PATH": os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")}
        # the ranks stop when this controller dies (on this host only: a pid means nothing on another;
        # under Slurm the step's cleanup ends a node's tree)
        env[LAUNCHER_ENV] = str(os.getpid())
        for r in range(self.n):
            tag = f"{job}-{r}"
            cmd = ["bash", str(self.run_dir / "launch" / f"node_{r}.sh")]
            node_env = {**env, TAG_ENV: tag, "MASTER_ADDR": self.master_addr}
            if self.n * self.per_node == 1:   # one device left after a shrink: no cluster, no msrun
                cmd = [sys.executable, "-m", "pretrain.worker", str(self.run_dir)]
                node_env = {k: v for k, v in node_env.items() if k not in ("RANK_ID", "RANK_SIZE", "MS_ROLE")}
            with open(self.run_dir / "logs" / f"node_{r}.log", "ab") as log:
                self.heads.procs.append(subprocess.Popen(
                    [*self.ns.prefix(self.slots[r]), *cmd], env=node_env, start_new_session=True, stdout=log,
                    stderr=subprocess.STDOUT, pass_fds=() if lock is None else (lock,)))
            self.tags.append(tag)

    def leave_out(self, node: int, nodes: int, per_node: int) -> None:
        """Node `node` (of the job as it ran) is left out; the job now runs `nodes` x `per_node`."""
        del self.slots[node]
        self.slots = self.slots[:nodes]
        self.n, self.per_node = nodes, per_node
        self.master_addr = self.ns.address(self.slots[0])

    def failed_node(self) -> Optional[Failure]:
        return self.heads.failed()

    @property
    def returncode(self) -> Optional[int]:
        return self.poll()

    def poll(self) -> Optional[int]:
        return self.heads.poll()

    def stop(self) -> None:
        """SIGKILL every process of every node's tree: the node's process group (bash, msrun, its
        scheduler and `tail -f`), then whatever carries its tag (workers in sessions of their own,
        and anything orphaned), until none is left."""
        for p in self.heads.procs:
            sigkill(p.pid)
        kill_tagged(self.tags, STOP_WAIT_S)
        for p in self.heads.procs:
            p.wait()


class SlurmNodes:
    """One task per node of this Slurm allocation, all in one `srun` step per generation."""
    _TASK = re.compile(r"task (\d+): (?:Exited with exit code (\d+)|(Killed|Terminated))")

    def __init__(self, cfg: DictConfig, run_dir: Path):
        self.run_dir, self.n = run_dir, int(os.environ.get("SLURM_JOB_NUM_NODES", cfg.hardware.num_nodes))
        self.per_node = int(os.environ.get("LOCAL_WORKER_NUM", cfg.hardware.devices_per_node))
        self.hosts = subprocess.run(["scontrol", "show", "hostnames", os.environ["SLURM_JOB_NODELIST"]],
                                    capture_output=True, text=True, check=True).stdout.split()
        if len(self.hosts) < self.n:
            raise PretrainRunError(f"SLURM_JOB_NODELIST={os.environ['SLURM_JOB_NODELIST']} names "
                                   f"{len(self.hosts)} hosts for SLURM_JOB_NUM_NODES={self.n} nodes")
        self.slots = list(range(self.n))   # node r of the job runs on hosts[slots[r]]
        self.master_addr = self.hosts[0]
        self.script = os.environ.get("NODE_SCRIPT", str(run_dir / "launch" / "msrun_node.sh"))
        self.proc: Optional[subprocess.Popen] = None
        self.err = run_dir / "logs" / "srun.log"

    def __enter__(self) -> "SlurmNodes":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self, env: Dict[str, str], lock: Optional[int]) -> None:
        """One task per node on the hosts still trusted; a task's SLURM_PROCID is its node rank
        (SLURM_NODEID counts the whole allocation, left-out hosts too)."""
        hosts = ",".join(self.hosts[s] for s in self.slots)
        env = {**env, "WORKER_NUM": str(self.n * self.per_node), "LOCAL_WORKER_NUM": str(self.per_node)}
        with open(self.err, "ab") as err:
            self.proc = subprocess.Popen(
                ["srun", f"--nodes={self.n}", f"--nodelist={hosts}", "--ntasks-per-node=1",
                 "--kill-on-bad-exit=1", "bash", "-c", 'NODE_RANK=$SLURM_PROCID exec bash "$0" "$1"', self.script, str(self.run_dir)],
                env=env, start_new_session=True, stderr=err, pass_fds=() if lock is None else (lock,))

    def leave_out(self, node: int, nodes: int, per_node: int) -> None:
        """Host of node `node` left out of the next generations (it stays in the allocation)."""
        del self.slots[node]
        self.slots = self.slots[:nodes]
        self.n, self.per_node = nodes, per_node
        self.master_addr = self.hosts[self.slots[0]]

    def failed_node(self) -> Optional[Failure]:
        if self.proc is None or self.proc.poll() in (None, 0):
            return None
        found = self._TASK.findall(self.err.read_text(errors="replace")) if self.err.is_file() else []
        node = int(found[-1][0]) if found else -1
        which = node if node >= 0 else "?"
        return Failure(-1, self.proc.returncode, f"node {which} of {self.n}: srun exited with code "
                                                 f"{self.proc.returncode} (see {self.err})", cause="node")

    @property
    def returncode(self) -> Optional[int]:
        return self.poll()

    def poll(self) -> Optional[int]:
        return None if self.proc is None else self.proc.poll()

    def request_stop(self) -> None:
        """SIGTERM through srun to every node's msrun_node.sh, which passes it to its ranks: they
        checkpoint at the next step (all at the same one) and exit 0."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        """srun killed: Slurm ends the step's processes on every node (its cgroup)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                sigkill(self.proc.pid)
                self.proc.wait()


class RemoteRanks(msrun.RankWatch):
    """Ranks on other hosts: their pids mean nothing here, so only their exit files and srun's
    status count (srun exits 0 only when every node's msrun did, which needs every rank's 0)."""
    trust_exit_code = True

    def pids(self) -> Dict[int, int]:
        return {}


class Progress:
    """No new line in metrics.jsonl (our loop) or a phase's losses.jsonl (MindFormers' engine,
    pretrain.engine.callbacks) for too long: a stuck job whose ranks cannot say so."""

    def __init__(self, run_dir: Path, res: DictConfig):
        self.path = run_dir / "metrics.jsonl"
        self.phase_logs = run_dir / "mindformers"
        self.first_s = float(res.first_step_timeout_s) + STALL_MARGIN_S
        self.step_s = float(res.watchdog_timeout_s) + STALL_MARGIN_S

    def restart(self) -> None:
        self.started, self.seen = time.time(), self._mtime()

    def _mtime(self) -> float:
        newest = 0.0
        for path in [self.path, *self.phase_logs.glob("*/losses.jsonl")]:
            try:
                newest = max(newest, path.stat().st_mtime)
            except OSError:
                pass
        return newest

    def stalled(self) -> Optional[Failure]:
        now, mtime = time.time(), self._mtime()
        if mtime > self.seen:   # a step (or an eval) since this generation started
            return (Failure(-1, None, f"no new step in {self.step_s:.0f} s (resilience.watchdog_timeout_s "
                                      f"+ {STALL_MARGIN_S:.0f} s): the job is stuck", cause="stall")
                    if now - mtime > self.step_s else None)
        if now - self.started > self.first_s:
            return Failure(-1, None, f"no first step in {self.first_s:.0f} s (resilience."
                                     f"first_step_timeout_s + {STALL_MARGIN_S:.0f} s): the job is stuck",
                           cause="stall")
        return None


def control(cfg: DictConfig, run_dir: Path, nodes: Any) -> Dict[str, float]:
    """Start every node, watch them, restart them all from the newest checkpoint on a failure.
    `nodes`: LocalNodes or SlurmNodes (entered here)."""
    run_dir = run_dir.resolve()
    res = cfg.resilience
    budget = supervise.RestartBudget.of(res)
    world = nodes.per_node * int(nodes.n)
    watch_cls = RemoteRanks if isinstance(nodes, SlurmNodes) else msrun.RankWatch
    ranks = watch_cls(run_dir / "logs", world)
    progress = Progress(run_dir, res)
    started = time.time()
    stopping: List[int] = []
    trained: List[str] = []   # MindFormers' phases this controller saw every rank finish
    previous = {sig: signal.signal(sig, _stop_handler(stopping, nodes, lambda: ranks))
                for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    try:
        with nodes:
            while True:
                phases = [p for p in remaining_launches(ResolvedRun.of(cfg)) if p is None or p not in trained]
                if not phases:   # MindFormers' engine: every phase finished
                    return {"wall_s": time.time() - started}
                port = free_port()
                cfg = OmegaConf.merge(cfg, {"hardware": {"master_port": port}})
                msrun._refreeze(cfg, run_dir)   # the ranks read the port they rendezvous on
                failure = _generation(cfg, run_dir, nodes, ranks, progress, port, phases[0])
                if failure is None:
                    if signal.SIGUSR1 in stopping and os.environ.get("SLURM_JOB_ID"):
                        _requeue(run_dir)
                    if stopping or phases[0] is None:
                        return {"wall_s": time.time() - started}
                    # every rank ended it well: the next phase is a launch of its own
                    trained.append(phases[0])
                    continue
                failed_at = time.time()
                can_shrink = res.elastic and nodes.n > 1
                if stopping or not failure.retryable or not (budget.allows() or can_shrink):
                    raise msrun._gave_up(failure, budget, res, stopping, shrink=not res.elastic)
                last, resume_at = supervise.steps_lost(run_dir, cfg)
                lost = {"last_step": last, "resume_step": resume_at,
                        "steps_lost": None if last is None else last - (resume_at or 0)}
                node = failure.rank // nodes.per_node if failure.rank >= 0 else _node_of(failure.message)
                if budget.allows():
                    n = budget.spend(node if node is not None else -1)
                    msrun._event(run_dir, "restart", cause=failure.message, fault=failure.cause, node=node,
                                 rank=failure.rank, exit=failure.exit, restart=n, max_restarts=int(res.max_restarts),
                                 failed_at=failed_at, port=port, **lost)
                    print(f"restart {n}/{res.max_restarts} (within {res.restart_window:g} s) of all "
                          f"{nodes.n} nodes: {failure.message.split('; ')[0]}; resuming from step {resume_at or 0} "
                          f"({lost['steps_lost']} steps lost)", flush=True)
                    continue
                cfg, ranks = _shrink(cfg, run_dir, nodes, ranks, budget, node, failure, failed_at, lost)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _shrink(cfg: DictConfig, run_dir: Path, nodes: Any, ranks: msrun.RankWatch,
            budget: supervise.RestartBudget, node: Optional[int], failure: Failure, failed_at: float,
            lost: Dict[str, Any]):
    """resilience.elastic past the budget: the node that failed most often in the window is left
    out; the job goes on over the nodes left with the largest data-parallel size they allow (the
    same global batch, grad_accum re-derived: pretrain.launch.supervise), a fresh budget."""
    left_out = budget.worst_rank(node if node is not None else -1)
    if left_out < 0:
        left_out = nodes.n - 1
    per_node = nodes.per_node
    dp = supervise.shrunk_dp(cfg, (nodes.n - 1) * per_node)
    if dp is None:
        raise msrun._gave_up(failure, budget, cfg.resilience, [], shrink=False)
    old = (int(cfg.parallel.dp), nodes.n)
    cfg = supervise.with_dp(cfg, dp)
    world = ParallelLayout.from_config(cfg).world_size
    cfg.hardware.devices_per_node = min(per_node, world)
    cfg.hardware.num_nodes = -(-world // cfg.hardware.devices_per_node)
    msrun._refreeze(cfg, run_dir)
    write_node_scripts(cfg, run_dir)
    nodes.leave_out(left_out, int(cfg.hardware.num_nodes), int(cfg.hardware.devices_per_node))
    budget.reset()
    msrun._event(run_dir, "shrink", cause=failure.message, node=left_out, exit=failure.exit, dp_from=old[0],
                 dp_to=dp, nodes_from=old[1], nodes_to=nodes.n, grad_accum=int(cfg.train.grad_accum),
                 failed_at=failed_at, **lost)
    where = f" (host {nodes.hosts[nodes.slots[0]]} now the master)" if isinstance(nodes, SlurmNodes) else ""
    print(f"elastic: node {left_out} kept failing ({budget.max_restarts} restarts within "
          f"{cfg.resilience.restart_window:g} s); going on with {nodes.n} node(s), data parallel {old[0]} -> "
          f"{dp}, grad_accum {cfg.train.grad_accum}, from step {lost['resume_step'] or 0} "
          f"({lost['steps_lost']} steps lost){where}",
          flush=True)
    return cfg, type(ranks)(run_dir / "logs", world)


def _generation(cfg: DictConfig, run_dir: Path, nodes: Any, ranks: msrun.RankWatch, progress: Progress,
                port: int, phase: Optional[str]) -> Optional[Failure]:
    """One start of every node, watched until every rank exited 0 (None) or one failed. `phase`:
    MindFormers' engine trains one phase per generation (its ranks' exit files are then this
    phase's alone), None: our loop, which chains the phases itself."""
    logs = run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    for stale in [*logs.glob("rank_*.exit"), *logs.glob("rank_*.pid"), logs / msrun.SCHEDULER_EXIT]:
        stale.unlink(missing_ok=True)
    ranks.new_launch(ranks.world)
    env = dict(os.environ)
    env.update(MASTER_ADDR=nodes.master_addr, MASTER_PORT=str(port), **compile_cache.env(cfg, run_dir, env))
    env["PHASES"] = phase or ""   # msrun_node.sh's msrun(s): this phase's, or one for our loop
    print(f"launch: {nodes.n} nodes, master {nodes.master_addr}:{port} (node logs: {logs}/node_<r>.log)",
          flush=True)
    nodes.start(env, rundir.held_fd(run_dir))
    progress.restart()

    def check() -> Optional[Failure]:
        # a port taken on the master before its scheduler bound it: the next generation takes another
        return msrun.scheduler_failed(logs, nodes.per_node) or nodes.failed_node() or progress.stalled()
    try:
        failure = ranks.wait(nodes, check)
    finally:
        ranks.deaths.close()
        nodes.stop()   # on success too: a scheduler or `tail -f` left behind
    if failure is not None and failure.rank >= 0 and not failure.message.startswith("node "):
        node = failure.rank // nodes.per_node
        failure = Failure(failure.rank, failure.exit, f"node {node}: {failure.message}", cause=failure.cause)
    return failure


def _node_of(message: str) -> Optional[int]:
    found = re.match(r"node (\d+)", message)
    return int(found.group(1)) if found else None


def _stop_handler(stopping: List[int], nodes: Any, ranks: Callable[[], msrun.RankWatch]):
    def handler(signum, frame):
        stopping.append(signum)
        if len(stopping) > 1 and signum != signal.SIGUSR1:   # every node's tree is killed on the way out
            raise StopForced(signum, "every node's ranks were killed without waiting for their checkpoint")
        print(f"{signal.Signals(signum).name}: the ranks checkpoint at the next step and stop", flush=True)
        if isinstance(nodes, SlurmNodes):
            nodes.request_stop()
        else:
            ranks().request_stop()
    return handler


def _requeue(run_dir: Path) -> None:
    """Back in the queue with the same job id; the next allocation resumes from the checkpoint."""
    job = os.environ["SLURM_JOB_ID"]
    done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True)
    msrun._event(run_dir, "requeue", job=job, ok=done.returncode == 0)
    print(f"requeued Slurm job {job}" if done.returncode == 0 else
          f"scontrol requeue {job} failed: {done.stderr.strip()}", flush=True)


def main(argv: Optional[List[str]] = None) -> int:
    """`python -m pretrain.launch.controller RUN_DIR`: the controller for this Slurm allocation."""
    args = sys.argv[1:] if argv is None else argv
    in_slurm = "SLURM_JOB_NODELIST" in os.environ
    if len(args) != 1 or not (Path(args[0]) / "config.yaml").is_file() or not in_slurm:
        print("usage: python -m pretrain.launch.controller RUN_DIR  (inside a Slurm allocation; RUN_DIR "
              "holds the frozen config.yaml)", file=sys.stderr)
        return 2
    run_dir = Path(args[0]).resolve()
    try:
        cfg = OmegaConf.load(run_dir / "config.yaml")
        control(cfg, run_dir, SlurmNodes(cfg, run_dir))
    except USER_ERRORS as exc:
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return getattr(exc, "exit_code", 2)
    except StopForced as exc:   # a second stop signal: the nodes' trees are killed already
        print(f"interrupted ({signal.Signals(exc.signum).name} again): {exc.what}; the same command resumes "
              f"from the newest checkpoint in {run_dir / 'checkpoints'}", file=sys.stderr)
        return 128 + exc.signum
    return 0


if __name__ == "__main__":
    sys.exit(main())
