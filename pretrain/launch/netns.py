"""Every node of a multi-node job on this one host, each in a network namespace of its own.

Why namespaces: msrun starts its scheduler on the node whose own address is --master_addr
(mindspore/parallel/cluster/process_entity/_utils.py `_is_local_ip`: `ip -j addr`, then the source
address a UDP socket gets towards it). On one network stack every node shares 127.0.0.1, so each
node would start a scheduler; a second loopback address (127.0.0.2) is not "local" by that test,
but the scheduler binds the master address itself (127.0.0.1:port), so node 1's workers, told
127.0.0.2, never reach it (measured: "Failed to connect to the meta server node url:
127.0.0.2:port"). In namespaces each node has its own address on a private bridge, only node 0
owns the master address, and every byte between nodes crosses that bridge, as between hosts.

Layout for a job of N nodes (names from a tag, so concurrent jobs never meet): namespace
`<tag>-sw` holds a bridge; namespace `<tag>-<r>` holds node r's end of a veth pair, address
10.<a>.<b>.<r+1>/24, and its own loopback. Creating them needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN).

The job controller removes them when it ends. Killed (kill -9), it cannot: its janitor, a small
process of its own started beside the namespaces (`python -m pretrain.launch.netns`), does, once
the nodes' processes inside have stopped by themselves (pretrain.resilience.orphan), instead of
the next run on that run dir.
"""
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional

from pretrain.config.errors import PretrainRunError
from pretrain.launch.tree import sigkill
from pretrain.resilience.orphan import wait_gone

JANITOR_LOG = "netns.log"   # in RUN_DIR/logs: what the janitor did
POLL_S = 0.5


class Namespaces:
    def __init__(self, run_dir: Path, nodes: int):
        digest = hashlib.sha256(str(run_dir.resolve()).encode()).digest()
        self.tag = "pt" + digest[:3].hex()        # short: interface names are at most 15 bytes
        self.nodes = nodes
        self.subnet = f"10.{200 + digest[3] % 50}.{digest[4]}"   # 10.200-249.x.0/24, per run dir

    def name(self, node: int) -> str:
        return f"{self.tag}-{node}"

    def address(self, node: int) -> str:
        return f"{self.subnet}.{node + 1}"

    def prefix(self, node: int) -> List[str]:
        """What runs a command inside node `node`'s namespace."""
        return ["ip", "netns", "exec", self.name(node)]

    def create(self) -> "Namespaces":
        if os.geteuid() != 0 or shutil.which("ip") is None:
            raise PretrainRunError(
                "hardware.nodes_on_this_host=true runs each node in a network namespace of its own, which "
                "needs root and iproute2's `ip` (msrun starts one scheduler per network stack): run as root, "
                "or start RUN_DIR/launch/node_<r>.sh on separate hosts")
        self.destroy()   # a previous job's, killed before it cleaned up
        sw = f"{self.tag}-sw"
        ip = ["ip", "netns", "add", sw], ["ip", "-n", sw, "link", "add", "br0", "type", "bridge"], \
            ["ip", "-n", sw, "link", "set", "br0", "up"]
        steps = list(ip)
        for r in range(self.nodes):
            ns, here, there = self.name(r), f"{self.tag}v{r}", f"{self.tag}b{r}"
            steps += [["ip", "netns", "add", ns],
                      ["ip", "link", "add", here, "netns", ns, "type", "veth",
                       "peer", "name", there, "netns", sw],
                      ["ip", "-n", sw, "link", "set", there, "master", "br0", "up"],
                      ["ip", "-n", ns, "addr", "add", f"{self.address(r)}/24", "dev", here],
                      ["ip", "-n", ns, "link", "set", here, "up"],
                      ["ip", "-n", ns, "link", "set", "lo", "up"]]
        for cmd in steps:
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                self.destroy()
                raise PretrainRunError(f"could not create the nodes' network namespaces ({' '.join(cmd)}: "
                                       f"{done.stderr.strip()}); start RUN_DIR/launch/node_<r>.sh on "
                                       f"separate hosts")
        return self

    def names(self) -> List[str]:
        return [f"{self.tag}-sw", *(self.name(r) for r in range(self.nodes))]

    def destroy(self) -> None:
        """Deleting a namespace deletes its veth ends (and the peer with it) and its bridge."""
        for ns in self.names():
            if Path("/run/netns", ns).exists():
                subprocess.run(["ip", "netns", "del", ns], capture_output=True)

    def pids(self) -> List[int]:
        """The processes inside the namespaces (what runs the nodes)."""
        found: List[int] = []
        for ns in self.names():
            if Path("/run/netns", ns).exists():
                listed = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
                found += [int(p) for p in listed.split()]
        return found

    def janitor(self, run_dir: Path, owner: int, grace_s: float, lock: Optional[int]) -> subprocess.Popen:
        """Start the process that removes the namespaces if `owner` (the job controller) dies without
        doing so: once nothing runs inside them, or grace_s after its death (the ranks stop within
        their watchdog's timeout), killing what is left. It holds the run dir's lock (`lock`) until
        then, so the next run on that dir never meets them half removed. The owner kills it before
        it removes them itself."""
        logs = run_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with open(logs / JANITOR_LOG, "ab") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "pretrain.launch.netns", str(owner), f"{grace_s:g}", str(run_dir),
                 str(self.nodes)], start_new_session=True, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, pass_fds=() if lock is None else (lock,))


def clean_up_after(owner: int, grace_s: float, namespaces: Namespaces) -> None:
    """The janitor's work: `owner` gone, wait for the namespaces to empty (grace_s at most), kill
    what is left, remove them."""
    wait_gone(owner)
    deadline = time.monotonic() + grace_s
    while namespaces.pids() and time.monotonic() < deadline:
        time.sleep(POLL_S)
    left = namespaces.pids()
    for pid in left:
        sigkill(pid)
    namespaces.destroy()
    print(f"job controller (pid {owner}) gone: removed the network namespaces {', '.join(namespaces.names())}"
          + (f" (killed what still ran in them after {grace_s:g} s: pids {left})" if left else ""),
          flush=True)


def main(argv: Optional[List[str]] = None) -> int:
    """`python -m pretrain.launch.netns OWNER_PID GRACE_S RUN_DIR NODES`: the janitor (Namespaces.janitor)."""
    owner, grace_s, run_dir, nodes = sys.argv[1:] if argv is None else argv
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # a Ctrl-C meant for the controller is not for it
    clean_up_after(int(owner), float(grace_s), Namespaces(Path(run_dir), int(nodes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
