"""`python -m pretrain.data` as the data tests run it (data=files' general source only, a 400-piece
tokenizer, 64-token rows, one worker), and the temp dirs a build must not leave in its cache."""
from pathlib import Path

from tests.helpers import cli

ARGS = ["data=files", "~data.sources.reasoning", "~data.sources.anneal", "data.tokenizer.vocab_size=400",
        "data.tokenizer.byte_fallback=false", "model.seq_length=64", "data.workers=1"]


def cli_data(cwd: Path, *args, cache=None, timeout: float = 300):
    """The finished process, its output captured; PRETRAIN_CACHE: cache, default cwd/cache."""
    return cli.run(*ARGS, *args, cwd=cwd, module="pretrain.data", cache=cache, timeout=timeout)


def temp_dirs(cache: Path):
    return sorted(str(p) for p in cache.rglob(".*tmp*")) if cache.exists() else []
