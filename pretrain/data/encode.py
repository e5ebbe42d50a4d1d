"""Tokenize a chunk of documents: sentencepiece, EOD after each, as one int32 stream (pack.Docs)."""
import itertools
from typing import Sequence

import numpy as np

from pretrain.data.pack import Docs


def encode_texts(sp, texts: Sequence[str], eod_id: int) -> Docs:
    """Documents as one int32 stream, each followed by EOD. One thread: data.workers processes are
    the parallelism (sentencepiece's own pool would otherwise run on every core in each of them)."""
    ids = sp.encode(list(texts), num_threads=1)
    lens = np.fromiter((len(x) for x in ids), np.int64, count=len(ids))
    flat = np.fromiter(itertools.chain.from_iterable(ids), np.int32, count=int(lens.sum()))
    tokens = np.insert(flat, np.cumsum(lens), eod_id).astype(np.int32)
    return Docs(tokens, (lens + 1).astype(np.int32))


def _select(docs: Docs, keep: np.ndarray) -> Docs:
    return Docs(docs.tokens[np.repeat(keep, docs.lens)], docs.lens[keep])
