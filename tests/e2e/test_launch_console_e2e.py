"""msrun's console relay: MindSpore's INFO log lines (tailed from rank 0's log by msrun) are dropped,
everything else, progress-bar updates included, passes on unchanged and without waiting for a newline."""
import io
import os
import subprocess
import sys

from pretrain.launch.console import ConsoleRelay

CHATTER = (b"[INFO] DISTRIBUTED(4242,7f3a,python):2026-12-03-09:41:02.123.456 [mindspore/ccsrc/distributed/"
           b"rpc/tcp/tcp_comm.cc:123] Initialize] Event base dispatch success!\n")
KEPT = [b"launch: msrun --worker_num=2\n", b"compiling the training graph...\n",
        b"\r  0%|          | 0/28", b"\r 11%|#         | 3/28 [00:04<00:31]",
        b"\r[WARNING] ME(4242,7f3a,python):2026 [x.cc:1] a warning stays\n",
        b"[INFO] a line of ours that merely starts like one\n", b"[INFORMATION]\n", b"[\n",
        b"error: rank 1 of 2 exited with code 1"]


def stream():
    return b"".join([KEPT[0], CHATTER, *KEPT[1:3], CHATTER.replace(b"4242", b"4243"), *KEPT[3:]])


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
