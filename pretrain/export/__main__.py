"""`python -m pretrain.export RUN_DIR [--step N | --phase NAME] --to DIR` (or `pretrain export ...`):
a run's checkpoint as a Hugging Face model directory (config.json, generation_config.json,
safetensors with transformers' names, the tokenizer), for lm-evaluation-harness, OpenCompass,
vLLM and fine-tuning. Exit 0 written; 2 refused (one line: nothing was written)."""
import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import List, Optional

from pretrain.config.errors import USER_ERRORS, PretrainRunError

# lazy imports (pretrain, omegaconf, sentencepiece): `pretrain export --help` answers before the export's
# modules load (+~400 ms, numpy and omegaconf)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="pretrain export", description=__doc__.split("\n")[0])
    ap.add_argument("run_dir", type=Path, help="the run directory (holds config.yaml and the checkpoints)")
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--step", type=int,
                       help="the checkpoint of this step (default: the newest that verifies)")
    which.add_argument("--phase", help="the final checkpoint of this phase (general, reasoning, anneal)")
    ap.add_argument("--to", type=Path, required=True, help="the new model directory (absent or empty)")
    ap.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32",
                    help="the weights' dtype (default float32, as trained here; bfloat16 halves the size)")
    ap.add_argument("--max-shard-gb", type=float, default=5.0, help="largest safetensors file (default 5)")
    ap.add_argument("--tokenizer", help="the sentencepiece .model, when the run's data cache is elsewhere")
    a = ap.parse_args(argv)
    try:
        summary = export(a.run_dir, a.to, step=a.step, phase=a.phase, dtype=a.dtype,
                         max_shard_bytes=int(a.max_shard_gb * 1e9), tokenizer=a.tokenizer)
    except USER_ERRORS as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: nothing was written", file=sys.stderr)
        return 130
    print(f"exported {summary['checkpoint']} (step {summary['step']}, {summary['architecture']}, "
          f"{summary['parameters'] / 1e6:.1f}M parameters, {summary['dtype']}) to {a.to} "
          f"in {summary['seconds']:.1f} s")
    if summary["fast_tokenizer"]:
        print(f"note: no tokenizer.json: {summary['fast_tokenizer']}; load the tokenizer with "
              f"AutoTokenizer.from_pretrained(DIR, use_fast=False) for the ids the model was trained on")
    return 0


def export(run_dir: Path, target: Path, *, step: Optional[int] = None, phase: Optional[str] = None,
           dtype: str = "float32", max_shard_bytes: int = 5 * 10**9, tokenizer: Optional[str] = None) -> dict:
    from omegaconf import OmegaConf

    from pretrain.config.resolved import ResolvedRun
    from pretrain.export import architecture, hf_config, hf_dir, names, source, tokenizer_files
    from pretrain.model.mindformers_config import init_std

    started = time.perf_counter()
    run_dir, target = Path(run_dir), Path(target).absolute()
    if not (run_dir / "config.yaml").is_file():
        raise PretrainRunError(f"{run_dir}: not a run dir (no config.yaml); give the run_dir a training "
                               f"wrote")
    hf_dir.check_target(target)
    run = ResolvedRun.of(source.load_frozen(run_dir))
    cfg = run.cfg
    architecture.of(cfg.model)   # an architecture export refuses: said before any checkpoint is read
    if phase is not None and run.phase(phase) is None:
        raise PretrainRunError(f"--phase {phase}: the run trains {', '.join(run.phase_names)}, not {phase!r}")
    layout = run.layout
    split = layout.tp * layout.pp * layout.cp * layout.ep > 1 or layout.zero_stage > 0
    if run.engine == "mindformers" and split:
        raise PretrainRunError(
            f"{run_dir}: MindFormers wrote per-rank shards of a split model (tp{layout.tp} pp{layout.pp} "
            f"ep{layout.ep} zero{layout.zero_stage}); merge them first with "
            f"mindspore.parallel.unified_safetensors (the run's strategy files) and export the merged file")
    ckpt = source.select(run_dir, run.engine, step=step, phase=phase, phases=run.phase_names)
    # The model block the checkpoint was saved with (our loop records the resolved config in its state)
    # wins over config.yaml, which a later start of the run dir may have rewritten.
    model = OmegaConf.create(ckpt.state["config"]["model"]) if "config" in ckpt.state else cfg.model
    arch = architecture.of(model)
    tensors = names.hf_tensors(arch, ckpt.weights)
    tok_path = tokenizer_files.find(cfg, ckpt.state, tokenizer)
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(tok_path))
    if sp.get_piece_size() != arch.vocab:
        raise PretrainRunError(f"tokenizer {tok_path} has {sp.get_piece_size()} pieces, the model "
                               f"{arch.vocab}: not the run's tokenizer (give it with --tokenizer)")
    ids = {role: token_id for role, (_, token_id) in tokenizer_files.special_tokens(sp).items()}
    fast_note: List[Optional[str]] = [None]

    def fill(out: Path) -> None:
        index = hf_dir.write_weights(out, tensors, hf_dir.DTYPES[dtype], max_shard_bytes)
        config = hf_config.config(arch, dtype, ids, init_std(model))
        (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        generation = hf_config.generation_config(ids)
        (out / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
        fast_note[0] = tokenizer_files.write(tok_path, out, arch.max_positions)
        provenance = {"run_dir": str(run_dir.resolve()), "engine": ckpt.engine, "step": ckpt.step,
                      "checkpoint": str(ckpt.path), "sha256_verified": ckpt.verified,
                      "model": str(model.name), "tokenizer": str(tok_path),
                      "bytes": index["metadata"]["total_size"]}
        (out / "pretrain_export.json").write_text(json.dumps(provenance, indent=2) + "\n")

    hf_dir.write(target, fill)
    params = sum(math.prod(t.shape) for t in tensors)
    return {"checkpoint": ckpt.path.name, "step": ckpt.step, "architecture": arch.hf_class,
            "parameters": params, "dtype": dtype, "seconds": time.perf_counter() - started,
            "fast_tokenizer": fast_note[0]}


if __name__ == "__main__":
    sys.exit(main())
