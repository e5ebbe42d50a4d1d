"""A fuzzed corpus for the data tests: every reader (txt, jsonl, parquet), plain, .gz and .zst, fed
random unicode (surrogates, NUL, control characters, bidi marks) and random bytes."""
import gzip
import json
import random
from pathlib import Path

import zstandard

from tests.helpers.data_files import paragraphs

_ODD = ["\ud800", "\udfff", "\udc80x", "\0", "\x01", "\x07", "\x1b[31m", "\x7f", "\x85", "\x9f", "\u200e",
        "\u200f", "\u202e", "\u2066", "\u2069", "\ufeff", "\ufffd", "\uffff", "\U0010ffff", "\ue000",
        "e\u0301", "\U0001f600", "\u4e2d\u6587", "\r", "\r\n", "\t", "\u2028", " "]


def _random_text(rng: random.Random, words) -> str:
    out = []
    for _ in range(rng.randrange(1, 60)):
        out.append(rng.choice(_ODD) if rng.random() < 0.3 else rng.choice(words))
        out.append(" " if rng.random() < 0.8 else "")
    return "".join(out)


def random_bytes(rng: random.Random, n: int) -> bytes:
    return bytes(rng.randrange(256) for _ in range(n))


def write_fuzz_corpus(d: Path, seed: int, words) -> None:
    """Every reader (txt, jsonl, parquet), plain, .gz and .zst, fed random unicode (surrogates,
    NUL, control characters, bidi marks) and random bytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    rng = random.Random(seed)
    texts = [_random_text(rng, words) for _ in range(30)]
    enc = [t.encode("utf-8", "surrogatepass") for t in texts]
    lines = []
    for t, b in zip(texts, enc):
        r = rng.random()
        lines.append(json.dumps({"text": t}).encode() if r < 0.5 else           # surrogates as \\ud800
                     b'{"text": "' + b.replace(b"\\", b"").replace(b'"', b"") + b'"}' if r < 0.8 else
                     random_bytes(rng, rng.randrange(1, 80)))
    files = {
        "a.jsonl": b"\n".join(lines) + b"\n",
        "b.txt": rng.choice(enc),
        "c.txt": random_bytes(rng, 3000),
        "d.jsonl": random_bytes(rng, 3000),
        "e.parquet": random_bytes(rng, 500),
    }
    for name, data in list(files.items()):
        files[name + ".gz"] = gzip.compress(data)
        files[name + ".zst"] = zstandard.ZstdCompressor().compress(data)
    files["f.jsonl.gz"] = random_bytes(rng, 300)          # not gzip at all
    files["g.txt.zst"] = random_bytes(rng, 300)
    for name, data in files.items():
        (d / name).write_bytes(data)
    rows = enc + [random_bytes(rng, 40) for _ in range(10)] + [None]
    column = pa.array(rows, pa.binary()).view(pa.string())       # no UTF-8 check: bad rows get written
    pq.write_table(pa.table({"text": column}), d / "h.parquet")
    (d / "h.parquet.zst").write_bytes(zstandard.ZstdCompressor().compress((d / "h.parquet").read_bytes()))
    (d / "h.parquet.gz").write_bytes(gzip.compress((d / "h.parquet").read_bytes()))


def words():
    return " ".join(paragraphs()[:20]).split()
