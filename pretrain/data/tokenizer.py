"""Tokenizer: a given sentencepiece model, or one trained on the corpus and cached.

Trained models reserve pad=0, eos=1 (the end-of-document token, EOD), bos=2, unk=3. They keep
text exactly: no NFKC, no whitespace collapsing (code indentation matters), a "\\n" piece, digits
split one per token (arithmetic), byte fallback for characters outside the vocabulary. The characters
that make up data.tokenizer.character_coverage of the text (0.9995: the common Han characters of a
Chinese corpus) are pieces of their own; the rarest rest is spelled in bytes.
"""
import io
import re
from pathlib import Path
from typing import Iterable, Iterator, Optional

from pretrain.config.errors import PretrainDataError
from pretrain.data.hashing import file_sha256
from pretrain.data.sources import split_text
from pretrain.io import write_atomic

# lazy imports (sentencepiece): +~20-130 ms on every import of the data package; loaded to train or read one

SPECIAL_IDS = {"pad_id": 0, "eos_id": 1, "bos_id": 2, "unk_id": 3}
_SENTENCE_CHARS = 2000     # lines are grouped into training "sentences" of about this size


def check_given(path: str) -> Path:
    p = Path(path).expanduser()
    if not p.is_file():
        raise PretrainDataError(f"data.tokenizer.path: no such file {path!r} (give a sentencepiece .model "
                                f"file, or set data.tokenizer.path=null data.tokenizer.train=true)")
    return p


def _cached(path: Path) -> bool:
    """A tokenizer that prepare() trained into the cache (data.cache_dir/tokenizers/<key>/), as
    opposed to one the user named in data.tokenizer.path."""
    p = Path(path)
    return p.parent.parent.name == "tokenizers" and re.fullmatch("[0-9a-f]{16}", p.parent.name) is not None


def _problem(path: Path) -> Optional[str]:
    import sentencepiece as spm
    try:
        spm.SentencePieceProcessor(model_file=str(path))
    except (OSError, RuntimeError) as exc:
        return f"not a sentencepiece model ({str(exc).strip() or type(exc).__name__})"
    return None


def unusable(path: Path) -> Optional[str]:
    """Why a tokenizer file cannot be used (missing, truncated, not a model), or None."""
    return "missing" if not Path(path).is_file() else _problem(path)


def load(path: Path):
    import sentencepiece as spm
    why = unusable(path)
    if why is None:
        return spm.SentencePieceProcessor(model_file=str(path))
    if _cached(path):      # name the cache, not a key the user never set
        cache = Path(path).parent.parent.parent
        raise PretrainDataError(f"cached tokenizer {str(path)!r} is {why} (in data.cache_dir {str(cache)!r}; "
                                f"delete {str(Path(path).parent)!r} and prepare again to rebuild it)")
    raise PretrainDataError(f"data.tokenizer.path: {str(path)!r} is {why}")


def info(path: Path) -> dict:
    """What the manifest records and the model/loader need: ids, vocabulary, checksum."""
    sp = load(path)
    if sp.eos_id() < 0:
        raise PretrainDataError(f"data.tokenizer.path: {str(path)!r} has no eos id, which is needed as "
                                f"the end-of-document token (train it with eos_id set)")
    return {"path": str(Path(path).resolve()), "sha256": file_sha256(path), "vocab_size": sp.get_piece_size(),
            "eod_id": sp.eos_id(), "pad_id": sp.pad_id() if sp.pad_id() >= 0 else sp.eos_id(),
            "bos_id": sp.bos_id(), "unk_id": sp.unk_id()}


def tokenizer_vocab_size(path) -> int:
    return load(Path(path)).get_piece_size()


def keep_every(docs: int, chars: int, wanted: int) -> int:
    """Decimation so the trainer sees about twice the sentences it samples, whatever the corpus."""
    estimate = docs + chars // _SENTENCE_CHARS
    return max(1, estimate // max(1, 2 * wanted))


def training_sentences(texts: Iterable[str], keep_every: int) -> Iterator[str]:
    """Every keep_every-th group of consecutive lines (newlines kept) of about 2000 chars: a
    deterministic, memory-bounded sample of the corpus. Over-long lines are cut at spaces first
    (the trainer silently skips sentences longer than its maximum)."""
    n = 0
    for text in texts:
        group: list = []
        size = 0
        for line in text.split("\n"):
            for piece in split_text(line, _SENTENCE_CHARS) if len(line) > _SENTENCE_CHARS else (line,):
                group.append(piece)
                size += len(piece) + 1
                if size >= _SENTENCE_CHARS:
                    if n % keep_every == 0:
                        yield "\n".join(group)
                    n += 1
                    group, size = [], 0
        if group:
            if n % keep_every == 0:
                yield "\n".join(group)
            n += 1


def train(sentences: Iterator[str], out_dir: Path, cfg, threads: int) -> Path:
    import sentencepiece as spm

    model = io.BytesIO()
    spm.set_random_generator_seed(0)   # the sentence sample, hence the model, is reproducible
    # model_writer, not model_prefix: the model records its model_prefix, and a path inside the
    # cache's temp dir would make the same tokenizer differ byte-wise between two caches.
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=sentences, model_writer=model, vocab_size=cfg.vocab_size,
            model_type=cfg.model_type, **SPECIAL_IDS, normalization_rule_name="identity",
            remove_extra_whitespaces=False, user_defined_symbols=["\n"], allow_whitespace_only_pieces=True,
            split_digits=True, byte_fallback=cfg.byte_fallback, character_coverage=cfg.character_coverage,
            hard_vocab_limit=False, max_sentence_length=8 * _SENTENCE_CHARS, num_threads=max(1, threads),
            input_sentence_size=cfg.train_sentences, shuffle_input_sentence=True, minloglevel=2)
    except RuntimeError as exc:
        too_small = _too_small(exc, cfg)
        if too_small is None:
            raise
        raise too_small from None
    path = out_dir / "tokenizer.model"
    write_atomic(path, model.getvalue())
    return path


# sentencepiece's check that every kept character (plus the byte and special pieces) fits the vocabulary
_REQUIRED = re.compile(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)")


def _too_small(exc: RuntimeError, cfg) -> Optional[PretrainDataError]:
    """The user's error in sentencepiece's refusal of a vocabulary smaller than the corpus's
    characters, as one line naming the key (data.tokenizer.vocab_size follows model.vocab_size,
    which the config rules keep equal) and the minimum sentencepiece computed; None for others."""
    found = _REQUIRED.search(str(exc))
    if found is None:
        return None
    need = int(found.group(2))
    return PretrainDataError(
        f"model.vocab_size={cfg.vocab_size} is too small for this corpus: its tokenizer needs at least "
        f"{need} pieces (every character that data.tokenizer.character_coverage={cfg.character_coverage} "
        f"keeps, plus the byte and special pieces); set model.vocab_size={need} or more, or lower "
        f"data.tokenizer.character_coverage")
