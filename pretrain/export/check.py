"""`python -m pretrain.export.check RUN_DIR EXPORT_DIR`: does the export hold the model that trained?

- logits: our MindSpore model (MindFormers' Mcore class, built from the run's frozen config, with
  the exported checkpoint's weights loaded) and the NumPy reference (reference.py) reading only
  EXPORT_DIR (config.json and the safetensors, by transformers' names) on the same tokens: the
  max abs difference of the logits;
- tokenizer: sentencepiece's ids vs transformers' AutoTokenizer loaded from EXPORT_DIR (fast and
  slow) on Chinese and English text, when transformers is importable.
Prints one JSON object; exit 0 when the logits agree within float32 noise (within_noise) and the
tokenizers agree.
"""
import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

from pretrain.config.attention import document_attention
from pretrain.export import architecture, reference, safetensors_file, tokenizer_files
from pretrain.export.hf_dir import cast
from pretrain.export.source import load_frozen, read_weights
from pretrain.model import builder
from pretrain.model.builder import prepare_environment

# lazy imports (mindspore, sentencepiece, transformers): mindspore by design (3-10 s); transformers +~0.9 s,
# sentencepiece +~0.1 s, loaded only by the comparison that needs them


def exported_weights(export_dir: Path) -> Dict[str, np.ndarray]:
    """Every tensor of the exported directory as float32, by its transformers name."""
    out = {}
    for f in sorted(Path(export_dir).glob("*.safetensors")):
        for name, stored in safetensors_file.read(f).items():
            out[name] = cast(stored.load(), stored.tag, "F32")
    return out


def sample_tokens(tokenizer_path: Path, batch: int, seq: int, vocab: int) -> np.ndarray:
    """[batch, seq] ids: the check texts (Chinese and English) encoded and repeated, one row per offset."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(tokenizer_path))
    ids = [i for t in tokenizer_files.CHECK_TEXTS for i in sp.encode(t)]
    ids = (ids * (batch * seq // max(len(ids), 1) + 2))
    return np.array([ids[r * 7:r * 7 + seq] for r in range(batch)], dtype=np.int32) % vocab


def mindspore_logits(run_dir: Path, weights: Dict[str, np.ndarray], tokens: np.ndarray) -> np.ndarray:
    """[batch, seq, vocab] float32 logits of our MindSpore model with `weights` (Mcore names) loaded.
    The whole rows are one causal document: positions 0..seq-1 (what transformers computes)."""
    import mindspore as ms


    cfg = load_frozen(run_dir)
    net = builder.build_model(cfg)
    for _, param in net.parameters_and_names():
        if param.name in weights:
            param.set_data(ms.Tensor(np.ascontiguousarray(weights[param.name])))
    net.set_train(False)   # GPTModel returns fp32 logits [batch * seq, vocab] when not training
    b, s = tokens.shape
    kwargs = dict(input_ids=ms.Tensor(tokens), labels=ms.Tensor(np.zeros_like(tokens)),
                  loss_mask=ms.Tensor(np.ones(tokens.shape, np.float32)))
    if document_attention(cfg) == "mask":
        kwargs.update(position_ids=ms.Tensor(np.broadcast_to(np.arange(s, dtype=np.int32), (b, s)).copy()),
                      attention_mask=ms.Tensor(np.broadcast_to(np.triu(np.ones((s, s), np.uint8), 1),
                                                               (b, 1, s, s)).copy()))
    return net(**kwargs).asnumpy().reshape(b, s, -1)


def compare_logits(run_dir: Path, export_dir: Path, batch: int = 2) -> Dict[str, float]:

    provenance = json.loads((export_dir / "pretrain_export.json").read_text())
    config = json.loads((export_dir / "config.json").read_text())
    arch = architecture.from_hf_config(config)
    cfg = load_frozen(run_dir)
    ckpt = Path(provenance["checkpoint"])
    mcore = read_weights(ckpt / "weights.safetensors" if ckpt.is_dir() else ckpt)
    tokens = sample_tokens(Path(provenance["tokenizer"]), batch, int(cfg.model.seq_length), arch.vocab)
    loaded = {k: cast(t.load(), t.tag, "F32") for k, t in mcore.items()}
    ours = mindspore_logits(run_dir, loaded, tokens).astype(np.float64)
    weights = exported_weights(export_dir)
    ref = reference.logits(arch, weights, tokens)
    noise = float(np.abs(reference.logits(arch, weights, tokens, np.float32) - ref).max())
    return {"logits_max_abs_diff": float(np.abs(ours - ref).max()), "float32_noise": noise,
            "logits_max_abs": float(np.abs(ref).max()), "tokens": int(tokens.size),
            "argmax_agree": float((ours.argmax(-1) == ref.argmax(-1)).mean())}


def within_noise(result: Dict[str, float]) -> bool:
    """Our float32 MindSpore logits are within float32 rounding of the float64 reference: at most
    2e-5 of the largest logit (about 170 float32 epsilons; the reference's own float32 arithmetic,
    `float32_noise`, is a few epsilons off, and MindSpore adds in another order through every layer).
    A wrong name, split, transpose or config key moves logits by the size of the logits themselves."""
    return result["logits_max_abs_diff"] <= 2e-5 * max(1.0, result["logits_max_abs"])


def compare_tokenizer(export_dir: Path, texts=tokenizer_files.CHECK_TEXTS) -> Dict[str, object]:
    """sentencepiece vs AutoTokenizer(export_dir) (fast where tokenizer.json exists, and slow)."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(export_dir / "tokenizer.model"))
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        from transformers import AutoConfig, AutoTokenizer
    except ImportError:
        return {"transformers": None}
    out: Dict[str, object] = {"config_class": type(AutoConfig.from_pretrained(str(export_dir))).__name__}
    for fast in (True, False):
        tok = AutoTokenizer.from_pretrained(str(export_dir), use_fast=fast)
        bad: List[str] = tokenizer_files.mismatches(
            sp, lambda t: tok(t, add_special_tokens=False)["input_ids"], texts)
        out["fast" if fast else "slow"] = {"class": type(tok).__name__, "texts": len(texts), "differ": bad,
                                          "tokens": sum(len(sp.encode(t)) for t in texts)}
    return out


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pretrain.export.check", description=__doc__.split("\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("export_dir", type=Path)
    a = ap.parse_args(argv)

    # MindFormers' logs go to a temporary directory: a check writes nothing into the run dir
    prepare_environment(tempfile.mkdtemp(prefix="pretrain-export-check-"))
    result: Dict[str, object] = {**compare_logits(a.run_dir, a.export_dir),
                                 "tokenizer": compare_tokenizer(a.export_dir)}
    print(json.dumps(result))
    tok = result["tokenizer"]
    tokens_ok = all(not v["differ"] for k, v in tok.items() if k in ("fast", "slow"))
    return 0 if within_noise(result) and tokens_ok else 1


if __name__ == "__main__":
    sys.exit(main())
