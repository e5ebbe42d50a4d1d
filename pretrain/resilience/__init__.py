"""Resilience for month-long runs: atomic checkpoints, auto-resume, spike and non-finite guards,
graceful stop, hang watchdog, and one JSONL events log. Each piece is its own module; none
imports mindspore at module level (checkpoint.py imports it inside the calls that need it)."""
