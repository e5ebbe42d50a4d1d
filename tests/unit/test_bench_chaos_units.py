"""The chaos benchmark reads the run's logs while the run writes them: incrementally (its own CPU
must not grow with the log, it is taken from the measured run), and right across a resume that cuts
a log back and writes the same steps again."""
import json

from pretrain.resilience.observe import lines


def _append(path, *rows, torn=""):
    with open(path, "a") as fh:
        fh.write("".join(json.dumps(r) + "\n" for r in rows) + torn)


def test_the_logs_are_read_incrementally_and_again_after_a_cut_back(tmp_path):
    path = tmp_path / "metrics.jsonl"
    assert lines(path, "train") == []                       # not written yet
    _append(path, *({"kind": "train", "step": s} for s in range(1, 6)), {"kind": "val", "step": 5},
            torn='{"kind": "train", "st')                    # a line being written
    assert [r["step"] for r in lines(path, "train")] == [1, 2, 3, 4, 5]
    _append(path, torn='ep": 6}\n')                         # ... and finished
    assert [r["step"] for r in lines(path, "train")] == [1, 2, 3, 4, 5, 6]   # the torn line, completed
    # a resume cuts the log back to its checkpoint (step 3) and logs steps 4.. again, other bytes
    kept = path.read_text().splitlines(keepends=True)[:3]
    path.write_text("".join(kept))
    _append(path, *({"kind": "train", "step": s, "again": True} for s in range(4, 9)))
    rows = lines(path, "train")
    assert [r["step"] for r in rows] == list(range(1, 9)) and all(r.get("again") for r in rows[3:])
    assert [r["step"] for r in lines(path, "val")] == []   # cut away with the steps after 3
