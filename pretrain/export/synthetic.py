"""`python -m pretrain.export.synthetic RUN_DIR [--layers N] [override ...]`: a run dir with one
checkpoint of random weights, to time an export at a size this machine cannot train:

    python -m pretrain.export.synthetic /tmp/big --layers 21          # ~1.0B parameters (Llama, width 2048)
    /usr/bin/time -v python -m pretrain.export /tmp/big --to /tmp/big-hf

The config is the default job's (its 4096-piece tokenizer from PRETRAIN_CACHE, which a default run
trains) widened to hidden 2048, 16 heads, 8 key/value heads, ffn 5632; overrides change it further.
The weights are written tensor by tensor (never all in memory) with the manifest a real save writes.
"""
import argparse
import json
import sys
from pathlib import Path

import numpy as np

from pretrain.config import frozen
from pretrain.config.compose import composer
from pretrain.export import architecture, safetensors_file
from pretrain.resilience.checkpoint import MANIFEST, STATE, WEIGHTS, _describe

WIDE = ["model.hidden_size=2048", "model.num_heads=16", "model.num_kv_heads=8", "model.ffn_hidden_size=5632"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pretrain.export.synthetic",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--layers", type=int, default=21)
    ap.add_argument("overrides", nargs="*")
    a = ap.parse_args(argv)

    with composer() as compose:
        cfg = compose([*WIDE, f"model.num_layers={a.layers}", *a.overrides, f"run_dir={a.run_dir.resolve()}"])
    arch = architecture.of(cfg.model)
    shapes = mcore_shapes(arch)
    path = a.run_dir / "checkpoints" / "step_00000001"
    path.mkdir(parents=True)
    (a.run_dir / "config.yaml").write_text(frozen.text(cfg))
    rng = np.random.default_rng(0)
    safetensors_file.write(path / WEIGHTS, [
        (name, "F32", shape, lambda shape=shape: rng.standard_normal(shape, dtype=np.float32) * 0.02)
        for name, shape in shapes.items()])
    (path / STATE).write_text(json.dumps({"step": 1}))
    files = {n: _describe(path / n) for n in (WEIGHTS, STATE)}
    (path / MANIFEST).write_text(json.dumps({"version": 1, "step": 1, "tag": None, "created": 0.0,
                                             "config_hash": "", "files": files}))
    params = sum(int(np.prod(s)) for s in shapes.values())
    print(f"{a.run_dir}: {arch.hf_class}, {params / 1e9:.3f}B parameters in {path / WEIGHTS}")
    return 0


def mcore_shapes(arch) -> dict:
    """The Mcore parameter shapes of a dense model (what our loop's checkpoint holds)."""
    h, hd = arch.hidden, arch.head_dim
    out = {"embedding.word_embeddings.weight": (arch.vocab, h)}
    for i in range(arch.layers):
        p = f"decoder.layers.{i}."
        out.update({p + "input_layernorm.weight": (h,),
                    p + "self_attention.linear_qkv.weight": ((arch.heads + 2 * arch.kv_heads) * hd, h),
                    p + "self_attention.linear_proj.weight": (h, arch.heads * hd),
                    p + "pre_mlp_layernorm.weight": (h,),
                    p + "mlp.linear_fc1.weight": (2 * arch.ffn, h),
                    p + "mlp.linear_fc2.weight": (h, arch.ffn)})
    out.update({"decoder.final_layernorm.weight": (h,), "output_layer.weight": (arch.vocab, h)})
    return out


if __name__ == "__main__":
    sys.exit(main())
