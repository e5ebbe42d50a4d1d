"""Small real corpora for the data tests: distinct English paragraphs from the Python installation
(the language reference that pydoc ships) and a few Chinese ones, written as jsonl or text files (one
line bad where a test says), and the data config that prepares them fast (a 400-piece tokenizer,
SEQ-token rows, one worker)."""
import gzip
import json
from pathlib import Path

from pretrain.config.compose import compose
from pretrain.config.schema import SourceConfig

SEQ = 64
# Chinese prose: what another encoding (GB18030, UTF-16) must carry through intact
ZH = ["北京是中华人民共和国的首都，也是全国的政治中心和文化中心，有三千多年的建城史。",
      "长江是中国第一长河，全长约六千三百公里，流经青海、西藏、四川、云南等十一个省级行政区。",
      "今天天气很好，我们一家人去公园散步，看到很多老人在下棋，孩子们在草地上放风筝。",
      "这本书讲述了一个普通农民家庭在改革开放以后四十年里的生活变化，语言朴实，感情真挚。",
      "研究人员发现，适量运动可以改善睡眠质量，并且有助于降低心血管疾病的发病风险。"]


def paragraphs():
    """Distinct real English paragraphs (prose, not operator tables), in a stable order."""
    from pydoc_data.topics import topics

    from pretrain.data.clean import symbol_ratio
    seen, out = set(), []
    for name in sorted(topics):
        for p in topics[name].split("\n\n"):
            p = " ".join(p.split())
            if len(p) >= 120 and symbol_ratio(p) < 0.15 and p not in seen:
                seen.add(p)
                out.append(p)
    return out


def data_cfg(cache, sources, **over):
    overrides = [f"data.cache_dir={cache}", "data.tokenizer.vocab_size=400",
                 "data.tokenizer.byte_fallback=false", f"model.seq_length={SEQ}", "data.val_fraction=0.1",
                 "data.workers=1",
                 *[f"data.{k}={v}" for k, v in over.items()]]
    cfg = compose(overrides).data
    cfg.sources = {name: SourceConfig(paths=[str(p) for p in paths]) for name, paths in sources.items()}
    return cfg


def write_jsonl(path: Path, texts):
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return path


def two_sources(root: Path):
    """Two sources under root: 'web' (jsonl, jsonl.gz) and 'books' (.txt files), 400 and 150
    documents; the sources mapping data_cfg takes."""
    paras = paragraphs()
    web, books = root / "web", root / "books"
    web.mkdir(), books.mkdir()
    write_jsonl(web / "a.jsonl", paras[:200])
    plain = write_jsonl(root / "tmp.jsonl", paras[200:400])
    (web / "b.jsonl.gz").write_bytes(gzip.compress(plain.read_bytes()))
    for i, p in enumerate(paras[400:550]):
        (books / f"{i:03d}.txt").write_text(p)
    return {"web": [web], "books": [books]}


def jsonl_with_one_bad_line(path: Path, texts, bad_line: bytes) -> Path:
    """texts as a jsonl file whose second line is bad_line instead."""
    lines = [json.dumps({"text": t}).encode() for t in texts]
    lines[1] = bad_line
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path
