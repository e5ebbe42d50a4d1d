"""msrun's console relay: MindSpore's INFO log lines (tailed from rank 0's log by msrun) are dropped,
everything else, progress-bar updates included, passes on unchanged and without waiting for a newline."""
import random

from pretrain.launch.console import LineFilter
from tests.helpers.console_stream import KEPT, stream


def test_chatter_lines_are_dropped_and_the_rest_passes_whole_however_the_bytes_are_split():
    want = b"".join(KEPT)
    for seed in range(300):
        rng = random.Random(seed)
        data, f, out, i = stream(), LineFilter(), [], 0
        while i < len(data):
            n = rng.randint(1, 40)
            out.append(f.feed(data[i:i + n]))
            i += n
        assert b"".join(out) + f.flush() == want, seed


def test_a_progress_bar_update_passes_before_its_line_ends_and_chatter_after_it_is_cut():
    f = LineFilter()
    assert f.feed(b"\r 11%|#  | 3/28") == b"\r 11%|#  | 3/28"
    assert f.feed(b"[IN") == b""          # may still be chatter: held
    assert f.feed(b"FO] DISTRIBUTED(1,") == b""
    assert f.feed(b"2,python): x\n\r 14%|#  | 4/28") == b"\r 14%|#  | 4/28"
    assert f.feed(b"[") == b""
    assert f.feed(b"WARNING] kept") == b"[WARNING] kept"
