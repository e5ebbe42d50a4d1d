"""A shrunken `data=files` run (phase=general, a save every 3 steps) and the corpus it reads: this
Python's stdlib docstrings as data/<source>/*.txt (the resume-data-identity and verified-reads runs)."""
import json
import subprocess
from pathlib import Path

MODEL = ["model.vocab_size=400", "model.hidden_size=64", "model.num_layers=2", "model.num_heads=4",
         "model.num_kv_heads=2", "model.ffn_hidden_size=128", "model.seq_length=64",
         "model.max_position_embeddings=64", "data.val_fraction=0.2"]
ARGS = ["data=files", *MODEL, "phase=general", "train.total_tokens=4096", "train.save_every_steps=3",
        "train.eval_every=0"]
SOURCES = ("general", "reasoning", "anneal")


def corpus(root: Path) -> None:
    """data/<source>/*.txt from this Python's stdlib docstrings: real prose, enough for 400 pieces."""
    import argparse
    import collections
    import functools
    import logging
    import unittest
    modules = (argparse, collections, functools, json, logging, subprocess, unittest)
    docs = list(dict.fromkeys(d for mod in modules
                              for name in dir(mod) for d in [getattr(getattr(mod, name), "__doc__", None)]
                              if isinstance(d, str) and len(d) > 200))
    for source in SOURCES:
        (root / "data" / source).mkdir(parents=True, exist_ok=True)
    for i, text in enumerate(docs[:90]):
        (root / "data" / SOURCES[i % 3] / f"{i}.txt").write_text(text)
