"""A console stream as msrun relays it: MindSpore's INFO chatter (to drop) between the lines and
progress-bar updates that must pass unchanged."""

CHATTER = (b"[INFO] DISTRIBUTED(4242,7f3a,python):2026-12-03-09:41:02.123.456 [mindspore/ccsrc/distributed/"
           b"rpc/tcp/tcp_comm.cc:123] Initialize] Event base dispatch success!\n")
KEPT = [b"launch: msrun --worker_num=2\n", b"compiling the training graph...\n",
        b"\r  0%|          | 0/28", b"\r 11%|#         | 3/28 [00:04<00:31]",
        b"\r[WARNING] ME(4242,7f3a,python):2026 [x.cc:1] a warning stays\n",
        b"[INFO] a line of ours that merely starts like one\n", b"[INFORMATION]\n", b"[\n",
        b"error: rank 1 of 2 exited with code 1"]


def stream():
    """KEPT with two chatter lines among them."""
    return b"".join([KEPT[0], CHATTER, *KEPT[1:3], CHATTER.replace(b"4242", b"4243"), *KEPT[3:]])
