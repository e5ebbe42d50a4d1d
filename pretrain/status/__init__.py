"""`pretrain status RUN_DIR`: the operator's view of a live or ended run (report.py gathers, render.py
shows, jsonl.py reads metrics.jsonl at a few offsets instead of line by line)."""
