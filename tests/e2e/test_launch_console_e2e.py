"""msrun's console relay: MindSpore's INFO log lines (tailed from rank 0's log by msrun) are dropped,
everything else, progress-bar updates included, passes on unchanged and without waiting for a newline."""
import io
import os
import subprocess
import sys

from pretrain.launch.console import ConsoleRelay
from tests.helpers.console_stream import KEPT, stream


def test_the_relay_copies_a_real_pipe_until_it_closes():
    read_end, write_end = os.pipe()
    sink = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    relay = ConsoleRelay(read_end, sink)
    child = subprocess.Popen([sys.executable, "-c", f"import sys; sys.stdout.buffer.write({stream()!r})"],
                             stdout=write_end)
    os.close(write_end)
    child.wait()
    relay.stop()
    sink.flush()
    assert sink.buffer.getvalue() == b"".join(KEPT)
