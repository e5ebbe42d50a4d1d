"""The "Your own data" commands of docs/data.md, run as written on a small corpus laid out as they expect."""
import gzip
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.repo import REPO


def _commands():
    text = (REPO / "docs" / "data.md").read_text()
    section = text.split("## Your own data", 1)[1].split("\n## ", 1)[0]
    return [shlex.split(line.strip()) for line in section.splitlines() if line.startswith("    python -m ")]


def _corpus(root: Path) -> None:
    """corpus/web/*.jsonl, corpus/code/*.jsonl.gz (text under `content`), corpus/chat/*.txt, from the
    docstrings and sources of this Python's stdlib: real English prose and code."""
    import argparse
    import collections
    import functools
    import logging
    import unittest
    modules = (argparse, collections, functools, json, logging, subprocess, unittest)
    docs = list(dict.fromkeys(d for mod in modules for name in dir(mod)
                              for d in [getattr(getattr(mod, name), "__doc__", None)]
                              if isinstance(d, str) and len(d) > 200))
    for sub in ("web", "code", "chat"):
        (root / "corpus" / sub).mkdir(parents=True)
    web = "".join(json.dumps({"text": t}) + "\n" for t in docs[::2])
    (root / "corpus" / "web" / "a.jsonl").write_text(web)
    for i, t in enumerate(docs[1::2]):
        (root / "corpus" / "chat" / f"{i}.txt").write_text(t)
    with gzip.open(root / "corpus" / "code" / "b.jsonl.gz", "wt") as fh:
        for package in (json, logging):
            for path in sorted(Path(package.__file__).parent.glob("*.py")):
                fh.write(json.dumps({"content": path.read_text()}) + "\n")


@pytest.mark.slow   # moved out of the default suite's 5 minutes (still run by CI)
def test_own_data_commands_run_as_written(tmp_path):
    commands = _commands()
    assert [c[:3] for c in commands] == [["python", "-m", "pretrain.data"], ["python", "-m", "pretrain"]]
    _corpus(tmp_path)
    env = {**os.environ, "PRETRAIN_CACHE": str(tmp_path / "cache")}
    env.pop("HYDRA_FULL_ERROR", None)
    prepared = subprocess.run([sys.executable, *commands[0][1:]], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=600)
    assert prepared.returncode == 0, prepared.stderr[-2000:]
    assert re.search(r"^reasoning\s+\d+\s+\d+", prepared.stdout, re.M), prepared.stdout
    manifests = list((tmp_path / "cache" / "datasets").glob("*/manifest.json"))
    assert len(manifests) == 3
    for m in map(json.loads, (p.read_text() for p in manifests)):
        assert m["documents"]["in"] == m["documents"]["kept"] + sum(m["documents"]["dropped"].values())
    trained = subprocess.run([sys.executable, *commands[1][1:], "dry_run=true"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=600)   # the dry run: checks and plans
    assert trained.returncode == 0, trained.stderr[-2000:]
    frozen = (tmp_path / "runs" / "tiny-single-cpu" / "config.yaml").read_text()
    assert "reasoning: 0.5" in frozen and "corpus/code/*.jsonl.gz" in frozen
