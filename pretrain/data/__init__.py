"""Data pipeline: read -> clean -> dedup -> tokenize -> pack -> shard -> manifest, and the loader.

`prepare(cfg.data)` builds (or reuses) every source's MindRecord shards; `BatchLoader` draws
deterministic, mixture-weighted batches from them. Importing this package never imports
mindspore.
"""
from pretrain.data.prepare import Prepared, prepare, tokenizer_vocab_size

__all__ = ["Prepared", "prepare", "tokenizer_vocab_size"]
