"""msrun: MindSpore's own launcher, one process per device, for this host or one node of many.

msrun starts a scheduler process (same process group as msrun) and one worker per device, each in
its own session. On its own, msrun notices a failed worker at once but then waits for the
scheduler's heartbeat timeout (~40 s) before it exits, and on Ctrl-C it SIGKILLs the workers. So
`run_local` watches the ranks itself through the files pretrain.worker leaves in RUN_DIR/logs/
(rank_<r>.pid when a rank starts, rank_<r>.exit when it ends): a non-zero exit or a rank whose
process vanished without one (kill -9, OOM killer) fails the launch within about a second, with
that rank's last log lines; the other ranks and msrun are then killed. Ctrl-C or SIGTERM to the
launcher goes on to the ranks as SIGTERM, so they checkpoint at the next step boundary (all at
the same step: pretrain.train.ranks.AgreedStop) and exit 0, and the launch ends normally.
"""
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

from omegaconf import DictConfig

from pretrain.config.errors import PretrainRunError
from pretrain.config.validate import num_devices

CLUSTER_TIME_OUT_S = 600
LAST_LINES = 12
POLL_S = 0.2
EXIT_GRACE_S = 60.0      # after every rank reported success, msrun and its scheduler get this long
# Lines of a worker log that are noise, not the error: MindSpore/MindFormers warnings, progress bars.
_NOISE = ("[WARNING]", "[INFO]", " - WARNING - ", " - INFO - ", "%|")
_REPORT_STARTS = ("Traceback (most recent call last)", "error:", "watchdog:", "Fatal Python error")


def command(cfg: DictConfig, run_dir: Path, node_rank: int = 0, phase: Optional[str] = None) -> List[str]:
    """The msrun command line for one node (ranks read run_dir/config.yaml); `phase`: the one phase
    MindFormers' engine trains in this launch."""
    hw = cfg.hardware
    return ["msrun", f"--worker_num={num_devices(hw)}", f"--local_worker_num={hw.devices_per_node}",
            f"--master_addr={hw.master_addr}", f"--master_port={hw.master_port}", f"--node_rank={node_rank}",
            f"--log_dir={run_dir / 'logs'}", "--join=True", f"--cluster_time_out={CLUSTER_TIME_OUT_S}",
            # the node's first rank on the console (rank 0's progress bar); every rank's log in log_dir
            f"--tail_worker_log={node_rank * int(hw.devices_per_node)}",
            "python", "-m", "pretrain.worker", str(run_dir), *([phase] if phase else [])]


def run_local(cfg: DictConfig, run_dir: Path, phase: Optional[str] = None) -> Dict[str, float]:
    """Run every rank on this host under msrun (in this directory, so the frozen config's relative
    paths mean what they meant here); fail fast with the first failing rank's last lines."""
    run_dir = run_dir.resolve()
    logs = run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    for stale in [*logs.glob("rank_*.exit"), *logs.glob("rank_*.pid")]:
        stale.unlink()
    check_port_free(cfg.hardware)
    env = dict(os.environ)
    # msrun starts `python` from PATH: make it this interpreter.
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    cmd = command(cfg, run_dir, phase=phase)
    print("launch:", shlex.join(cmd), flush=True)
    started = time.time()
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    ranks = RankWatch(logs, num_devices(cfg.hardware))
    try:
        with _forward_stop_signals(ranks):
            failure = ranks.wait(proc)
    except BaseException:
        _kill(proc, ranks)   # never leave ranks running behind an error in this process
        raise
    if failure is not None or proc.poll() is None:   # failed, or msrun lingering after success
        _kill(proc, ranks)
    if failure is not None:
        raise PretrainRunError(failure)
    return {"wall_s": time.time() - started}


@contextmanager
def _forward_stop_signals(ranks: "RankWatch") -> Iterator[None]:
    """SIGINT / SIGTERM to the launcher (Ctrl-C, a scheduler's preemption notice) go on to the
    ranks, which checkpoint at the next step boundary, all at the same step, and exit 0; the wait
    goes on. A second one kills them. (msrun, in its own session, never sees the first.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received = []

    def forward(signum: int, frame: Any) -> None:
        received.append(signum)
        if len(received) > 1:
            raise KeyboardInterrupt
        print(f"{signal.Signals(signum).name}: the ranks checkpoint at the next step and stop "
              f"(send it again to kill them)", flush=True)
        # as SIGTERM: MindSpore's runtime in a rank may take SIGINT for itself
        ranks.signal(signal.SIGTERM)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
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


class RankWatch:
    """The ranks of this host as pretrain.worker reports them in RUN_DIR/logs/."""

    def __init__(self, logs: Path, world: int):
        self.logs, self.world = logs, world

    def exits(self) -> Dict[int, dict]:
        out = {}
        for path in self.logs.glob("rank_*.exit"):
            info = json.loads(path.read_text())
            out[int(info["rank"])] = info
        return out

    def pids(self) -> Dict[int, int]:
        return {int(p.stem.split("_")[1]): int(p.read_text()) for p in self.logs.glob("rank_*.pid")}

    def wait(self, proc: subprocess.Popen) -> Optional[str]:
        """None once every rank exited 0 (and msrun with them); else why the launch failed."""
        done_at = None
        while True:
            exits, pids = self.exits(), self.pids()
            failed = sorted(r for r, e in exits.items() if e["exit"] != 0)
            if failed:
                e = exits[failed[0]]
                return self.message(failed[0], f"exited with code {e['exit']}" + (f" ({e['error']})" if e["error"] else ""))
            vanished = sorted(r for r, pid in pids.items() if r not in exits and not _alive(pid))
            if vanished:
                return self.message(vanished[0], "ended without an exit status (killed by a signal or the OOM "
                                                 "killer, or exited below Python, e.g. by its watchdog)")
            if proc.poll() is not None:
                if len(exits) == self.world:
                    return None
                missing = sorted(set(range(self.world)) - set(exits))
                return self.message(missing[0], f"never reported an exit status; msrun exited with code "
                                                f"{proc.returncode} (see {self.logs / 'scheduler.log'})")
            if len(exits) == self.world:   # all ranks done: msrun only waits for its scheduler now
                done_at = done_at or time.time()
                if time.time() - done_at > EXIT_GRACE_S:
                    print(f"msrun did not exit {EXIT_GRACE_S:.0f} s after every rank finished: stopping it", flush=True)
                    return None
            time.sleep(POLL_S)

    def signal(self, signum: int) -> None:
        for pid in self.pids().values():
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
        while any(_alive(pid) for pid in pids) and time.time() < deadline:
            time.sleep(0.05)

    def message(self, rank: int, what: str) -> str:
        log = self.logs / f"worker_{rank}.log"
        return (f"rank {rank} of {self.world} {what}; the run resumes from its last checkpoint when relaunched "
                f"with the same command. Last lines of {log}: " + " | ".join(last_lines(log)))


def _alive(pid: int) -> bool:
    """Running (a zombie that msrun has not reaped yet counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False
    except OSError:   # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False


def _kill(proc: subprocess.Popen, ranks: RankWatch) -> None:
    ranks.kill()
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)   # msrun and its scheduler
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
