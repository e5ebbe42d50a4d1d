"""The network namespaces of a 2-node job on one host (pretrain.launch.netns) outlive a job
controller killed with kill -9 only until the nodes' processes inside have stopped (they stop by
themselves: pretrain.resilience.orphan): its janitor removes them then (issue 40; before, they
stayed until the next run on that run dir). Real namespaces and processes; needs root."""
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pretrain.launch.netns import JANITOR_LOG, Namespaces

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None,
                                reason="network namespaces need root and iproute2")


def existing(ns: Namespaces):
    return [n for n in ns.names() if Path("/run/netns", n).exists()]


@pytest.fixture
def job(tmp_path):
    """The namespaces of a 2-node job, a stand-in for its controller, and their janitor."""
    run_dir = tmp_path / "run"
    ns = Namespaces(run_dir, 2).create()
    procs = []

    def start(cmd, **kw):
        procs.append(subprocess.Popen(cmd, **kw))
        return procs[-1]
    controller = start([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        yield run_dir, ns, controller, start
    finally:
        for p in procs:
            p.kill()
            p.wait()
        ns.destroy()


def test_a_killed_controllers_namespaces_go_once_the_node_inside_has_stopped(job):
    run_dir, ns, controller, start = job
    node = start([*ns.prefix(1), "sleep", "2"])   # node 1's tree, still stopping
    janitor = ns.janitor(run_dir, controller.pid, grace_s=60, lock=None)
    time.sleep(0.5)
    assert existing(ns) == ns.names() and janitor.poll() is None   # the controller lives: nothing to do
    controller.kill()
    controller.wait()
    time.sleep(0.5)
    assert existing(ns) == ns.names()   # not under the feet of a node still inside
    node.wait(timeout=10)
    assert janitor.wait(timeout=10) == 0
    assert existing(ns) == []
    assert "removed the network namespaces" in (run_dir / "logs" / JANITOR_LOG).read_text()


def test_a_node_that_does_not_stop_within_the_grace_is_killed_and_the_namespaces_go(job):
    run_dir, ns, controller, start = job
    node = start([*ns.prefix(0), "sleep", "120"])
    janitor = ns.janitor(run_dir, controller.pid, grace_s=1, lock=None)
    controller.kill()
    assert janitor.wait(timeout=20) == 0
    assert node.wait(timeout=10) == -9 and existing(ns) == []
    log = (run_dir / "logs" / JANITOR_LOG).read_text()
    assert f"killed what still ran in them after 1 s: pids [{node.pid}]" in log
