"""The JSONL events log: valid lines, thread safety, and nothing lost to a kill -9."""
import signal
import subprocess
import sys

from pretrain.resilience.events import read_events
from tests.helpers.repo import REPO


def test_events_survive_kill_9(tmp_path):
    path = tmp_path / "e.jsonl"
    script = (f"import sys, os, signal; sys.path.insert(0, {str(REPO)!r})\n"
              f"from pretrain.resilience.events import EventLog\n"
              f"e = EventLog({str(path)!r})\n"
              f"for i in range(3): e.log('save', step=i)\n"
              f"os.kill(os.getpid(), signal.SIGKILL)\n")
    proc = subprocess.run([sys.executable, "-c", script], timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert [e["step"] for e in read_events(path)] == [0, 1, 2]
