"""The run's sentencepiece tokenizer as transformers' tokenizer files.

- tokenizer.model + tokenizer_config.json: LlamaTokenizer (the slow tokenizer, sentencepiece
  itself) in legacy mode, which encodes text exactly as sentencepiece does; special tokens and their
  ids are the model's own (pad 0, eos/EOD 1, bos 2, unk 3 for a tokenizer the data pipeline trained).
- add_bos_token / add_eos_token false: our documents are encoded without BOS and end with EOD
  (pretrain/data/encode.py), so a BOS the model never saw is not put in front of every prompt.
- tokenizer.json (the fast tokenizer): transformers' LlamaConverter, written only when transformers
  is importable and the converted tokenizer gives sentencepiece's ids on the check texts (Chinese,
  English, code, digits, newlines); otherwise left out, and the export says why and that
  AutoTokenizer.from_pretrained(DIR, use_fast=False) is the exact one (use_fast=True would convert
  the sentencepiece model itself, with the same differences).
"""
import json
import os
import shutil
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from pretrain.config.errors import PretrainDataError

# lazy imports (sentencepiece, tokenizers, transformers, pretrain.data.hashing): transformers +~0.9 s, the
# data package +~400 ms (numpy, omegaconf), sentencepiece +~0.1 s; each loaded by the one function that uses it

# Texts the fast tokenizer must encode like sentencepiece before it is written (and the tests' check).
CHECK_TEXTS: Tuple[str, ...] = (
    "The quick brown fox jumps over the lazy dog.",
    "  Leading spaces, tabs\tand a newline\nthen more text.\n\n",
    "def add(a, b):\n    return a + b  # 12345 + 678 = 13023\n",
    "机器学习是人工智能的一个分支，它使计算机能够从数据中学习。",
    "北京是中华人民共和国的首都，也是全国的政治、文化中心。",
    "Mixed 中文 and English: 数字 2026 年 12 月 7 日。",
    "Rare characters 龘靐齉 and emoji 🙂 fall back to bytes.",
)


def special_tokens(sp) -> Dict[str, Tuple[str, int]]:
    """{role: (piece, id)} of the model's special tokens that exist (id >= 0)."""
    out = {}
    roles = (("bos", sp.bos_id()), ("eos", sp.eos_id()), ("unk", sp.unk_id()), ("pad", sp.pad_id()))
    for role, token_id in roles:
        if token_id >= 0:
            out[role] = (sp.id_to_piece(token_id), int(token_id))
    return out


def tokenizer_config(sp, max_length: int) -> Dict:
    specials = special_tokens(sp)
    config = {
        "tokenizer_class": "LlamaTokenizer",
        "legacy": True,               # sentencepiece's own handling of the dummy prefix and spaces
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": int(max_length),
        "sp_model_kwargs": {},
        "spaces_between_special_tokens": False,
    }
    for role, (piece, _) in specials.items():
        config[f"{role}_token"] = piece
    return config


def write(tokenizer_path: Path, out: Path, max_length: int) -> Optional[str]:
    """Write the tokenizer files into `out`; returns why tokenizer.json was left out (None: written)."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(tokenizer_path))
    shutil.copyfile(tokenizer_path, out / "tokenizer.model")
    config = tokenizer_config(sp, max_length)
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    specials = {f"{role}_token": piece for role, (piece, _) in special_tokens(sp).items()}
    (out / "special_tokens_map.json").write_text(json.dumps(specials, indent=2, ensure_ascii=False) + "\n")
    return _write_fast(sp, out)


def _write_fast(sp, out: Path) -> Optional[str]:
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")   # not its "no PyTorch" banner on our stderr
    try:
        from tokenizers import Tokenizer
        from transformers import LlamaTokenizerFast
    except ImportError as e:
        return f"transformers is not importable here ({e}); the slow tokenizer is complete"
    try:
        converted = LlamaTokenizerFast.from_pretrained(str(out), from_slow=True, legacy=True)
    except Exception as e:   # the converter's failures have no common type
        return f"transformers could not convert the sentencepiece model ({type(e).__name__}: {e})"
    # The converter makes sentencepiece's user-defined pieces ("\n") added tokens, which the fast
    # tokenizer cuts out before normalising, so each piece after one got its own dummy-prefix "▁"
    # ("\n    return" gained a token). sentencepiece never merges them with a neighbour anyway, and no
    # merge in the vocabulary contains one, so as plain vocabulary entries they stay whole and the
    # text is normalised once, as sentencepiece does. Special tokens stay added tokens.
    state = json.loads(converted.backend_tokenizer.to_str())
    state["added_tokens"] = [t for t in state["added_tokens"] if t["special"]]
    fast = Tokenizer.from_str(json.dumps(state))
    bad = mismatches(sp, lambda t: fast.encode(t, add_special_tokens=False).ids, CHECK_TEXTS)
    if bad:
        return f"the converted fast tokenizer encodes {bad[0]!r} differently from sentencepiece"
    fast.save(str(out / "tokenizer.json"))
    return None


def mismatches(sp, encode, texts: Sequence[str]) -> List[str]:
    """The texts that `encode` turns into other ids than sentencepiece does."""
    return [t for t in texts if list(encode(t)) != sp.encode(t)]


def find(cfg, state: Dict, given: Optional[str]) -> Path:
    """The tokenizer the run trained with: --tokenizer, else data.tokenizer.path, else the one in
    the run's data cache (data.cache_dir/tokenizers/) whose sha256 the checkpoint recorded (our loop
    records it; for a MindFormers checkpoint, the only one in the cache of the model's vocabulary)."""
    from pretrain.data.hashing import file_sha256

    recorded = str((state.get("data") or {}).get("tokenizer") or "")
    if given or cfg.data.tokenizer.get("path"):
        path = Path(given or cfg.data.tokenizer.path).expanduser()
        what = "--tokenizer" if given else "data.tokenizer.path"
        if not path.is_file():
            raise PretrainDataError(f"{what}: no such file {str(path)!r} (give the sentencepiece .model "
                                    f"the run trained with)")
        if recorded and not file_sha256(path).startswith(recorded):
            raise PretrainDataError(f"{what}: {str(path)!r} is not the tokenizer the checkpoint was "
                                    f"trained with (its sha256 starts {recorded}): the same ids would mean "
                                    f"other text")
        return path
    cache = Path(str(cfg.data.cache_dir)).expanduser() / "tokenizers"
    candidates = sorted(cache.glob("*/tokenizer.model"))
    if recorded:
        candidates = [p for p in candidates if file_sha256(p).startswith(recorded)]
    else:
        import sentencepiece as spm
        vocab = int(cfg.model.vocab_size)
        candidates = [p for p in candidates
                      if spm.SentencePieceProcessor(model_file=str(p)).get_piece_size() == vocab]
    if len(candidates) == 1:
        return candidates[0]
    which = f"with sha256 {recorded}..." if recorded else f"of vocabulary {cfg.model.vocab_size}"
    raise PretrainDataError(f"{'no' if not candidates else len(candidates)} tokenizer {which} in {cache} "
                            f"(data.cache_dir of the run): give the run's sentencepiece model with "
                            f"--tokenizer PATH")
