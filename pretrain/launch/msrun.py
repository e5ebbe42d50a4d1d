"""msrun: MindSpore's own launcher, one process per device, for this host or one node of many.

msrun starts a scheduler process (same process group as msrun) and one worker per device, each in
its own session. On its own, msrun notices a failed worker at once but then waits for the
scheduler's heartbeat timeout (~40 s) before it exits, and on Ctrl-C it SIGKILLs the workers. So
`launch` watches the ranks itself through the files pretrain.worker leaves in RUN_DIR/logs/
(rank_<r>.pid when a rank starts, rank_<r>.exit when it ends): a non-zero exit or a rank whose
process vanished without one (kill -9, OOM killer) fails the launch within about a second, with
that rank's last log lines; the other ranks and msrun are then killed, and the job starts again
from its newest verified checkpoint within resilience.max_restarts / restart_window, shrinking
its data-parallel size with resilience.elastic (pretrain.launch.supervise). Ctrl-C or SIGTERM to the
launcher goes on to the ranks as SIGTERM, so they checkpoint at the next step boundary (all at
the same step: pretrain.train.ranks.AgreedStop) and exit 0, and the launch ends normally. From
then on the ranks alone say how it ended: msrun and its scheduler, when a `kill` of the whole job
reached them too, may end first (msrun's own stderr is RUN_DIR/logs/msrun.log). A second one
kills the ranks (StopForced: the app says so in one line, exit 130).
"""
import json
import os
import re
import select
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from omegaconf import DictConfig, OmegaConf

from pretrain import rundir
from pretrain.config import frozen
from pretrain.config.errors import PretrainRunError
from pretrain.config.layout import ParallelLayout, num_devices
from pretrain.io import write_atomic
from pretrain.launch import compile_cache, supervise, tree
from pretrain.launch.console import ConsoleRelay
from pretrain.launch.supervise import Failure
from pretrain.resilience.events import EventLog
from pretrain.resilience.orphan import LAUNCHER_ENV
from pretrain.resilience.signals import StopForced

CLUSTER_TIME_OUT_S = 600
LAST_LINES = 12
POLL_S = 0.1
# A rank's error when a peer went quiet (heartbeats missing): msrun's scheduler told it the cluster is
# abnormal, or its collective (the gradients' AllReduce) timed out waiting for the peer, both about
# MS_NODE_TIMEOUT after the peer stopped. The peer is the cause, and the scheduler names it in its exit
# file within seconds (a CI run saw the AllReduce's error first: node 0 was blamed for node 1's freeze).
_PEER_LOST = re.compile(r"The state of the cluster is error|Launch kernel failed, name: ?\S*"
                        r"(AllReduce|AllGather|ReduceScatter|Broadcast|AllToAll|AlltoAll|Send|Receive|Barrier)")
PEER_NAMED_S = 10.0
SCHEDULER_EXIT = "scheduler.exit"   # pretrain.worker.scheduler's failure report
MSRUN_LOG = "msrun.log"             # msrun's own stderr
PORT_TRIES = 5     # a master port taken between the check and the scheduler's bind: tried again
EXIT_GRACE_S = 60.0      # after every rank reported success, msrun and its scheduler get this long
# Lines of a worker log that are noise, not the error: MindSpore/MindFormers warnings, progress bars.
_NOISE = ("[WARNING]", "[INFO]", " - WARNING - ", " - INFO - ", "%|")
_REPORT_STARTS = ("Traceback (most recent call last)", "error:", "watchdog:", "Fatal Python error")
# MindSpore 2.9's scheduler, a rank's heartbeats missing: "The total number of timed out node is 1. Timed
# out node list is: [const vector]{1}, worker 1 is the first one timed out, please check its log."
_TIMED_OUT = re.compile(r"worker (\d+) is the first one timed out")


def command(cfg: DictConfig, run_dir: Path, node_rank: int = 0, phase: Optional[str] = None) -> List[str]:
    """The msrun command line for one node (ranks read run_dir/config.yaml); `phase`: the one phase
    MindFormers' engine trains in this launch."""
    hw = cfg.hardware
    return ["msrun", f"--worker_num={ParallelLayout.from_config(cfg).devices}", f"--local_worker_num={hw.devices_per_node}",
            f"--master_addr={hw.master_addr}", f"--master_port={hw.master_port}", f"--node_rank={node_rank}",
            f"--log_dir={run_dir / 'logs'}", "--join=True", f"--cluster_time_out={CLUSTER_TIME_OUT_S}",
            # the node's first rank on the console (rank 0's progress bar); every rank's log in log_dir
            f"--tail_worker_log={node_rank * int(hw.devices_per_node)}",
            "python", "-m", "pretrain.worker", str(run_dir), *([phase] if phase else [])]


def launch(cfg: DictConfig, run_dir: Path, phase: Optional[str] = None,
              budget: Optional["supervise.RestartBudget"] = None) -> Dict[str, float]:
    """Run every rank on this host under msrun (in this directory, so the frozen config's relative
    paths mean what they meant here) and keep the job going through failures: a failed rank stops
    the launch at once and, within the restart budget, the job starts again from the newest
    verified checkpoint; past the budget, with resilience.elastic, without the rank that keeps
    failing (pretrain.launch.supervise). Every restart and shrink is an event in events.jsonl.
    `budget`: the job's, shared by the launches of its phases (MindFormers' engine), else this one's."""
    run_dir = run_dir.resolve()
    res = cfg.resilience
    budget = budget or supervise.RestartBudget.of(res)
    devices = list(range(ParallelLayout.from_config(cfg).devices))   # this host's devices the job runs on
    started = time.time()
    ranks = RankWatch(run_dir / "logs", len(devices))
    port_tries = 0
    with _forward_stop_signals(ranks) as stopping:
        while True:
            cfg = _free_port(cfg, run_dir, taken=port_tries > 0)
            ranks.new_launch(ParallelLayout.from_config(cfg).devices)
            failure = _launch_once(cfg, run_dir, ranks, devices, phase)
            if failure is None:
                return {"wall_s": time.time() - started}
            if failure.cause == "scheduler" and not stopping and port_tries < PORT_TRIES:
                port_tries += 1   # a port race, not the job's failure: no restart spent
                print(f"{failure.message}: retrying on a free port", flush=True)
                continue
            failed_at = time.time()
            if stopping or not failure.retryable or not (budget.allows() or res.elastic):
                raise _gave_up(failure, budget, res, stopping)
            last, resume_at = supervise.steps_lost(run_dir, cfg)
            lost = {"last_step": last, "resume_step": resume_at,
                    "steps_lost": None if last is None else last - (resume_at or 0)}
            if budget.allows():
                n = budget.spend(failure.rank)
                _event(run_dir, "restart", cause=failure.message, rank=failure.rank, exit=failure.exit,
                       restart=n, max_restarts=int(res.max_restarts), failed_at=failed_at, **lost)
                print(f"restart {n}/{res.max_restarts} (within {res.restart_window:g} s): "
                      f"{failure.message.split('; ')[0]}; resuming from step {resume_at or 0} "
                      f"({lost['steps_lost']} steps lost)", flush=True)
                continue
            left_out = budget.worst_rank(failure.rank)
            dp = supervise.shrunk_dp(cfg, len(devices) - 1)
            if dp is None:
                raise _gave_up(failure, budget, res, stopping, shrink=False)
            old_dp = int(cfg.parallel.dp)
            device = devices.pop(left_out)
            cfg = supervise.with_dp(cfg, dp)
            devices = devices[:ParallelLayout.from_config(cfg).devices]
            _refreeze(cfg, run_dir)
            budget.reset()
            _event(run_dir, "shrink", cause=failure.message, rank=left_out, device=device, exit=failure.exit,
                   dp_from=old_dp, dp_to=dp, grad_accum=int(cfg.train.grad_accum), devices=devices,
                   failed_at=failed_at, **lost)
            print(f"elastic: rank {left_out} (device {device}) kept failing ({budget.max_restarts} restarts "
                  f"within {res.restart_window:g} s); going on with data parallel {old_dp} -> {dp} on "
                  f"devices {devices}, grad_accum {cfg.train.grad_accum}, from step {resume_at or 0} "
                  f"({lost['steps_lost']} steps lost)", flush=True)


def _launch_once(cfg: DictConfig, run_dir: Path, ranks: "RankWatch", devices: List[int],
                 phase: Optional[str] = None) -> Optional[Failure]:
    """One start of the job's ranks, watched until every rank exited 0 (None) or one failed (all
    of them are stopped then)."""
    logs = run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    for stale in [*logs.glob("rank_*.exit"), *logs.glob("rank_*.pid"), logs / SCHEDULER_EXIT]:
        stale.unlink(missing_ok=True)
    env = dict(os.environ)
    env.update(compile_cache.env(cfg, run_dir, env))   # a restart's ranks skip their compile
    # msrun starts `python` from PATH: make it this interpreter.
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env[LAUNCHER_ENV] = str(os.getpid())   # the ranks stop when this launcher dies (resilience.orphan)
    env[tree.TAG_ENV] = tag = tree.new_tag()   # every process of this launch, found by it (_kill)
    if cfg.hardware.device == "ascend":   # after a shrink, the devices the job still trusts
        env["ASCEND_RT_VISIBLE_DEVICES"] = ",".join(map(str, devices))
    if ranks.world == 1:   # one device left after a shrink: no cluster to rendezvous, no msrun
        cmd = [sys.executable, "-m", "pretrain.worker", str(run_dir), *([phase] if phase else [])]
        env = {k: v for k, v in env.items() if k not in ("RANK_ID", "RANK_SIZE", "MS_ROLE")}
        out = err = open(logs / "worker_0.log", "ab")
    else:
        cmd, out, err = command(cfg, run_dir, phase=phase), None, None
    print("launch:", shlex.join(cmd) + (f" (log: {logs / 'worker_0.log'})" if out else ""), flush=True)
    # msrun (or the one worker) inherits the run dir's lock (pretrain.rundir), so it stays held
    # while the ranks live, even when this launcher is killed.
    lock = rundir.held_fd(run_dir)
    relay = None
    try:
        if out is None:   # msrun's console (rank 0's log, tailed) through the chatter filter
            read_end, out = os.pipe()
            relay = ConsoleRelay(read_end)
            # msrun's own report (a traceback when its scheduler ended badly, as in a stop) stays in
            # the run's logs; the launcher says in one line what happened
            err = open(logs / MSRUN_LOG, "ab")
        proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=out, stderr=err,
                                pass_fds=() if lock is None else (lock,))
    finally:   # the child holds its own copies of the write end and the log file(s)
        if relay is not None:
            os.close(out)
        if err is not None:
            err.close()
    stopped = None
    try:
        try:
            failure = ranks.wait(proc, lambda: scheduler_failed(logs))
        except BaseException:
            _kill(proc, ranks, tag)   # never leave ranks running behind an error in this process
            raise
        finally:
            ranks.deaths.close()
        if failure is None and ranks.stopping and proc.poll() not in (None, 0):
            # rank 0 said so on the console through msrun's `tail -f`, which may have gone with msrun
            stopped = (f"stopped: every rank checkpointed and exited 0 (msrun itself ended with code "
                       f"{proc.returncode}, see {logs / MSRUN_LOG}); the same command resumes from step "
                       f"{supervise.steps_lost(run_dir, cfg)[1] or 0} ({run_dir / 'checkpoints'})")
        if failure is not None or proc.poll() != 0:   # failed, msrun lingering, or gone before its ranks
            _kill(proc, ranks, tag)
    finally:
        if relay is not None:
            relay.stop()
    if stopped:   # after what the relay still had
        print(stopped, flush=True)
    return failure


def scheduler_failed(logs: Path, per_node: Optional[int] = None) -> Optional[Failure]:
    """msrun's scheduler ended with an error (pretrain.worker.scheduler left why). At once: its port
    was taken between the check and its bind (the ranks would only wait for it until their cluster
    timeout). Later: it heard no heartbeat from a rank for MS_NODE_TIMEOUT (~30 s), whose process
    (or node: `per_node` ranks each, for the job controller) is stopped, frozen or cut off; the
    scheduler names the first such rank."""
    try:
        info = json.loads((logs / SCHEDULER_EXIT).read_text())
    except (OSError, ValueError):
        return None
    error, log = info.get("error") or "", logs / "scheduler.log"
    timed_out = _TIMED_OUT.search(error)
    if timed_out:
        rank = int(timed_out.group(1))
        who = f"rank {rank}" if per_node is None else f"node {rank // per_node} (rank {rank})"
        return Failure(rank, None, cause="timeout", message=(
            f"{who} timed out: msrun's scheduler heard no heartbeat from it (stopped, frozen, or cut off "
            f"from the network), see {log}; the run resumes from its last checkpoint when relaunched with "
            f"the same command"))
    return Failure(-1, int(info["exit"]), f"msrun's scheduler on port {info.get('port')} failed at once "
                   f"({error}; see {log}): the port was taken after the check", cause="scheduler")


def _gave_up(failure: Failure, budget: "supervise.RestartBudget", res: DictConfig, stopping: List[int],
             shrink: bool = True) -> PretrainRunError:
    if stopping:   # a stop was asked for and a rank did not get there
        asked = signal.Signals(stopping[0]).name
        return PretrainRunError(f"{asked} asked every rank to checkpoint and stop, but {failure.message}")
    if not failure.retryable:
        return PretrainRunError(failure.message)
    why = (f"resilience.max_restarts={budget.max_restarts} restarts within resilience.restart_window="
           f"{res.restart_window:g} s are spent" if budget.max_restarts else
           "resilience.max_restarts=0 (no automatic restart)")
    if res.elastic and not shrink:
        why += " and no smaller data-parallel size is left (hardware.min_devices, the global batch)"
    # the rank's last log lines stay at the end of the one line
    where = "; the run resumes"
    return supervise.RestartsExhausted(failure.message.replace(where, f"; {why}{where}", 1))


def _event(run_dir: Path, kind: str, **fields: Any) -> None:
    with EventLog(run_dir / "events.jsonl") as events:
        events.log(kind, **fields)


def _refreeze(cfg: DictConfig, run_dir: Path) -> None:
    """The frozen config the ranks read, as the launcher now runs it (a new port, a shrunk layout)."""
    write_atomic(run_dir / "config.yaml", frozen.text(cfg))


def _free_port(cfg: DictConfig, run_dir: Path, taken: bool = False) -> DictConfig:
    """A single-host job whose master_port is busy (or was `taken` from its scheduler) takes a
    free one (in the frozen config too); several nodes keep the explicit one, which every node
    must agree on."""
    if int(cfg.hardware.num_nodes) > 1 or num_devices(cfg.hardware) == 1:
        return cfg
    try:
        if not taken:
            check_port_free(cfg.hardware)
            return cfg
    except PretrainRunError:
        pass
    with socket.socket() as s:
        s.bind((str(cfg.hardware.master_addr), 0))
        port = s.getsockname()[1]
    print(f"hardware.master_port={cfg.hardware.master_port} is in use: this single-host job takes the free "
          f"port {port}", flush=True)
    cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    cfg.hardware.master_port = port
    _refreeze(cfg, run_dir)
    return cfg


@contextmanager
def _forward_stop_signals(ranks: "RankWatch") -> Iterator[List[int]]:
    """SIGINT / SIGTERM to the launcher (Ctrl-C, a scheduler's preemption notice) go on to the
    ranks, which checkpoint at the next step boundary, all at the same step, and exit 0; the wait
    goes on (and no failure after it is restarted: the yielded list holds the signals received).
    A second one kills them. (msrun, in its own session, never sees the first.)"""
    received: List[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def forward(signum: int, frame: Any) -> None:
        received.append(signum)
        if len(received) > 1:   # _launch_once kills every rank on the way out; the app says so in one line
            raise StopForced(signum, "the ranks were killed without waiting for their checkpoint")
        print(f"{signal.Signals(signum).name}: the ranks checkpoint at the next step and stop "
              f"(send it again to kill them)", flush=True)
        ranks.request_stop()

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def check_port_free(hw: DictConfig) -> None:
    """msrun's scheduler listens on master_port; a busy port would only show as a cluster timeout."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((str(hw.master_addr), int(hw.master_port)))
        except OSError as e:
            raise PretrainRunError(
                f"hardware.master_port={hw.master_port} on {hw.master_addr} is in use ({e.strerror}): another "
                f"run is using it; pick a free one with hardware.master_port=<port>") from None


class DeathOrder:
    """When each rank's process ended, to the millisecond: a pidfd per rank (Linux >= 5.3) wakes
    the launcher's wait the moment one exits, so the rank that failed first is told apart from the
    ones that failed because of it. Without pidfds: the order the polls found them in."""

    def __init__(self) -> None:
        self._poll = select.poll()
        self._fds: Dict[int, Tuple[int, int]] = {}   # fd -> (rank, pid)
        self._pids: Dict[int, int] = {}              # rank -> pid watched
        self.ended: Dict[int, float] = {}            # rank -> monotonic time its process ended

    def watch(self, pids: Dict[int, int]) -> None:
        for rank, pid in pids.items():
            if self._pids.get(rank) == pid:
                continue
            self._pids[rank] = pid
            try:
                fd = os.pidfd_open(pid)
            except (AttributeError, OSError):   # gone already, or no pidfd: noted when found dead
                continue
            self._fds[fd] = (rank, pid)
            self._poll.register(fd, select.POLLIN)

    def sleep(self, seconds: float) -> None:
        """Up to `seconds`, less when a watched process ends."""
        if not self._fds:
            time.sleep(seconds)
            return
        ready = self._poll.poll(seconds * 1000)
        now = time.monotonic()   # those found in one wake-up ended in the same window: no order
        for fd, _ in ready:
            rank, _ = self._fds.pop(fd)
            self._poll.unregister(fd)
            os.close(fd)
            self.ended.setdefault(rank, now)

    def first(self, ranks: Iterable[int]) -> Optional[int]:
        """The rank among `ranks` whose process ended first (one still running: it ends now)."""
        ranks = list(ranks)
        return min(ranks, key=self._key) if ranks else None

    def _key(self, rank: int) -> Tuple[float, int]:
        return self.ended.get(rank, time.monotonic()), rank

    def before(self, a: int, b: int) -> bool:
        """`a` ended strictly earlier than `b` (a tie is no order)."""
        return self._key(a)[0] < self._key(b)[0]

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()


class RankWatch:
    """The ranks of this host as pretrain.worker reports them in RUN_DIR/logs/."""
    trust_exit_code = False   # True: the launched process's exit 0 says every rank ended well

    def __init__(self, logs: Path, world: int):
        self.logs, self.world = logs, world
        self.stopping = False
        self._told: set = set()   # pids already sent the stop
        self.deaths = DeathOrder()

    def new_launch(self, world: int) -> None:
        """The same job started again (a restart, a shrink): new processes, maybe fewer."""
        self.world = world
        self.deaths.close()
        self.deaths, self._told = DeathOrder(), set()

    def request_stop(self) -> None:
        """SIGTERM to every rank now, and to any that starts later in this launch (wait() passes it
        on): as SIGTERM, since MindSpore's runtime in a rank may take SIGINT for itself."""
        self.stopping = True
        self._tell()

    def _tell(self) -> None:
        for pid in self.pids().values():
            if pid not in self._told:
                self._told.add(pid)
                self.signal_pid(pid, signal.SIGTERM)

    def exits(self) -> Dict[int, dict]:
        out = {}
        for path in self.logs.glob("rank_*.exit"):
            info = json.loads(path.read_text())
            out[int(info["rank"])] = info
        return out

    def pids(self) -> Dict[int, int]:
        return {int(p.stem.split("_")[1]): int(p.read_text()) for p in self.logs.glob("rank_*.pid")}

    def _peer_named(self, check: Optional[Callable[[], Optional[Failure]]]) -> Optional[Failure]:
        """What `check` finds within PEER_NAMED_S: a rank that failed only because the scheduler told it
        another went quiet is not the cause; the scheduler names that one a moment later (its exit
        file), or the job controller sees the node's tree gone."""
        deadline = time.monotonic() + PEER_NAMED_S
        while check is not None and time.monotonic() < deadline:
            found = check()
            if found is not None:
                return found
            self.deaths.sleep(POLL_S)
        return None

    def wait(self, proc: Any, check: Optional[Callable[[], Optional[Failure]]] = None) -> Optional[Failure]:
        """None once every rank exited 0 (and msrun with them); else why the launch failed.
        `check`: a failure the ranks' files cannot show, asked each poll after them (the job
        controller's: a node's process tree gone, no new step)."""
        done_at = None
        while True:
            if self.stopping:   # a rank that started after the stop request
                self._tell()
            exits, pids = self.exits(), self.pids()
            self.deaths.watch(pids)
            # the first rank to fail: a rank that lost its peer fails right after it (in its next
            # collective), and msrun SIGKILLs every other worker within a second of a failure
            failed = self.deaths.first(r for r, e in exits.items() if e["exit"] != 0)
            gone = [r for r, pid in pids.items() if r not in exits and not tree.alive(pid)]
            for r in gone:   # found dead before its pidfd said so (or without one): now
                self.deaths.ended.setdefault(r, time.monotonic())
            vanished = self.deaths.first(gone)
            # ended in the same window: the one killed without a word is the cause, not its peer
            if failed is not None and (vanished is None or self.deaths.before(failed, vanished)):
                e = exits[failed]
                named = self._peer_named(check) if _PEER_LOST.search(e["error"] or "") else None
                return named or Failure(failed, int(e["exit"]), self.message(
                    failed, f"exited with code {e['exit']}" + (f" ({e['error']})" if e["error"] else "")))
            if vanished is not None:
                return Failure(vanished, None, self.message(
                    vanished, "ended without an exit status (killed by a signal or the OOM killer, or "
                              "exited below Python)"))
            # After a stop request the ranks' own word decides: msrun, its scheduler or a node's head
            # may end first (a `kill` of the whole job reaches them too) while the ranks still save.
            found = check() if check is not None and len(exits) < self.world and not self.stopping else None
            if found is not None:
                return found
            if proc.poll() is not None:
                if len(exits) == self.world or (self.trust_exit_code and proc.returncode == 0):
                    return None
                if self.stopping and any(tree.alive(pid) for r, pid in pids.items() if r not in exits):
                    self.deaths.sleep(POLL_S)
                    continue
                missing = sorted(set(range(self.world)) - set(exits))
                return Failure(missing[0], None, self.message(
                    missing[0], f"never reported an exit status; msrun exited with code {proc.returncode} "
                                f"(see msrun's and its scheduler's logs in {self.logs})"))
            if len(exits) == self.world:   # all ranks done: msrun only waits for its scheduler now
                done_at = done_at or time.time()
                if time.time() - done_at > EXIT_GRACE_S:
                    print(f"msrun did not exit {EXIT_GRACE_S:.0f} s after every rank finished: stopping it", flush=True)
                    return None
            self.deaths.sleep(POLL_S)

    @staticmethod
    def signal_pid(pid: int, signum: int) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    def kill(self, wait_s: float = 10.0) -> None:
        """SIGKILL every rank's process group (msrun setsid()s each worker) and wait until they are
        gone, so a restart right after never meets a dying rank."""
        pids = list(self.pids().values())
        for pid in pids:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:   # not a group leader after all: the process alone
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        deadline = time.time() + wait_s
        while any(tree.alive(pid) for pid in pids) and time.time() < deadline:
            time.sleep(0.05)

    def message(self, rank: int, what: str) -> str:
        log = self.logs / f"worker_{rank}.log"
        return (f"rank {rank} of {self.world} {what}; the run resumes from its last checkpoint when relaunched "
                f"with the same command. Last lines of {log}: " + " | ".join(last_lines(log)))


def _kill(proc: subprocess.Popen, ranks: RankWatch, tag: Optional[str] = None) -> None:
    ranks.kill()
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)   # msrun and its scheduler
    if tag is not None:   # a worker that had not written its pid file yet, a `tail -f`
        tree.kill_tagged([tag])
    proc.wait()


def last_lines(log: Path) -> List[str]:
    """The log's last lines that are not noise, led by the line that starts the last report
    (a traceback, an `error:` line, a watchdog or fatal-error dump) when that is further up."""
    if not log.is_file():
        return ["(no log)"]
    lines = [_from_report(ln.strip()) for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    useful = [ln for ln in lines if not any(n in ln for n in _NOISE)]
    if not useful:
        return ["(no error in the log; it ends with)", *lines[-3:]]
    tail = useful[-LAST_LINES:]
    starts = [i for i, ln in enumerate(useful) if ln.startswith(_REPORT_STARTS)]
    if starts and starts[-1] < len(useful) - LAST_LINES:
        tail = [useful[starts[-1]], "...", *tail]
    return tail


def _from_report(line: str) -> str:
    """A report printed after a progress bar without a newline starts mid-line: cut it free."""
    found = [i for i in (line.find(m) for m in _REPORT_STARTS) if i > 0]
    return line[min(found):] if found else line
