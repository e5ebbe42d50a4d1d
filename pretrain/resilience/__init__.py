"""Resilience for month-long runs: atomic checkpoints, auto-resume, spike and non-finite guards,
graceful stop, hang watchdog, and one JSONL events log. Each piece is its own module; keeper.py
joins them into the one component the training loop calls (resume, after_step, stop_requested).
None imports mindspore at module level (checkpoint.py imports it inside the calls that need it)."""
