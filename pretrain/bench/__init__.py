"""Benchmarks a user runs (`python -m pretrain.bench.<name>`): side-by-side ratios, never timed asserts."""
