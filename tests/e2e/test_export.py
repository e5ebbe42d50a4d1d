"""`python -m pretrain.export`: a run's checkpoint as a Hugging Face directory (pretrain/export/).

Fast: the name mapping on synthetic checkpoints (written here from transformers-named random weights
the way MindFormers 1.9.0 fuses them when it loads a Hugging Face checkpoint: the export must give
them back exactly), config.json / tokenizer files that transformers loads, sharding, bf16 rounding,
and every refusal (one line, exit 2, nothing written). With MindSpore: the NumPy reference forward
pass of the exported directory equals our MindSpore model's logits (dense Llama, Qwen3-MoE).
Slow: a real short run of the default job exported and checked the same way, with its 4096-piece
Chinese-English tokenizer."""
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from pretrain.config import frozen
from pretrain.config.errors import PretrainConfigError
from pretrain.data.hashing import file_sha256
from pretrain.export import architecture, hf_dir, reference, safetensors_file, tokenizer_files
from pretrain.export.check import compare_tokenizer, exported_weights, within_noise
from pretrain.resilience.checkpoint import MANIFEST, STATE, WEIGHTS, _describe
from tests.helpers import cli
from tests.helpers.models import SHRINK

MOE = ["model=qwen3_30b_a3b", "model.head_dim=16", "model.num_experts=4", "model.num_experts_per_token=2",
       "model.moe_ffn_hidden_size=32"]
TEXT = ("Machine learning is a field of study in artificial intelligence concerned with statistical "
        "algorithms that learn from data. 机器学习是人工智能的一个分支，它使计算机能够从数据中学习。"
        "北京是中华人民共和国的首都，也是全国的政治、文化中心。 def add(a, b): return a + b\n")


# ---------------------------------------------------------------- synthetic runs (no mindspore)
@pytest.fixture(scope="module")
def sp_model(tmp_path_factory):
    """A 512-piece tokenizer trained by the data pipeline's own trainer (same options as a run's)."""
    from pretrain.data.tokenizer import train

    out = tmp_path_factory.mktemp("tok")
    opts = SimpleNamespace(vocab_size=512, model_type="bpe", byte_fallback=True, character_coverage=0.9995,
                           train_sentences=1000)
    sentences = [TEXT * 3, *tokenizer_files.CHECK_TEXTS] * 20
    return train(iter(sentences), out, opts, threads=1)


def hf_random(arch, rng):
    """transformers-named random float32 weights of `arch` (norm gains random too: a swapped norm shows)."""
    h, hd, f = arch.hidden, arch.head_dim, arch.ffn
    w = {"model.embed_tokens.weight": (arch.vocab, h), "model.norm.weight": (h,)}
    if not arch.tie_embeddings:
        w["lm_head.weight"] = (arch.vocab, h)
    for i in range(arch.layers):
        p = f"model.layers.{i}."
        a = p + "self_attn."
        w.update({p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
                  a + "q_proj.weight": (arch.heads * hd, h), a + "k_proj.weight": (arch.kv_heads * hd, h),
                  a + "v_proj.weight": (arch.kv_heads * hd, h), a + "o_proj.weight": (h, arch.heads * hd)})
        if arch.qk_norm:
            w.update({p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,)})
        if arch.experts:
            w[p + "mlp.gate.weight"] = (arch.experts, h)
            for e in range(arch.experts):
                q = f"{p}mlp.experts.{e}."
                w.update({q + "gate_proj.weight": (arch.moe_ffn, h), q + "up_proj.weight": (arch.moe_ffn, h),
                          q + "down_proj.weight": (h, arch.moe_ffn)})
        else:
            w.update({p + "mlp.gate_proj.weight": (f, h), p + "mlp.up_proj.weight": (f, h),
                      p + "mlp.down_proj.weight": (h, f)})
    # matrices ~N(0, 0.3); norm gains ~1 + N(0, 1)
    return {k: (rng.standard_normal(s) * (0.3 if len(s) == 2 else 1.0) + (len(s) == 1)).astype(np.float32)
            for k, s in w.items()}


def to_mcore(arch, hf):
    """MindFormers 1.9.0's fusion of transformers weights (model_mixin.concat_qkv_weight_megatron,
    concat_ffn_weight_megatron (the interleaved MLP layout it trains with), concat_expert_weight; names
    from models/qwen3*/utils.py), plus the optimizer state and MoE buffers a real checkpoint carries
    beside them."""
    out = {"embedding.word_embeddings.weight": hf["model.embed_tokens.weight"],
           "decoder.final_layernorm.weight": hf["model.norm.weight"]}
    if not arch.tie_embeddings:
        out["output_layer.weight"] = hf["lm_head.weight"]
    g, rep, hd = arch.kv_heads, arch.heads // arch.kv_heads, arch.head_dim
    for i in range(arch.layers):
        p, m = f"model.layers.{i}.", f"decoder.layers.{i}."
        q = hf[p + "self_attn.q_proj.weight"].reshape(g, rep * hd, -1)
        k = hf[p + "self_attn.k_proj.weight"].reshape(g, hd, -1)
        v = hf[p + "self_attn.v_proj.weight"].reshape(g, hd, -1)
        out[m + "self_attention.linear_qkv.weight"] = np.concatenate([q, k, v], 1).reshape(-1, arch.hidden)
        out[m + "self_attention.linear_proj.weight"] = hf[p + "self_attn.o_proj.weight"]
        out[m + "input_layernorm.weight"] = hf[p + "input_layernorm.weight"]
        out[m + "pre_mlp_layernorm.weight"] = hf[p + "post_attention_layernorm.weight"]
        if arch.qk_norm:
            out[m + "self_attention.q_layernorm.weight"] = hf[p + "self_attn.q_norm.weight"]
            out[m + "self_attention.k_layernorm.weight"] = hf[p + "self_attn.k_norm.weight"]
        if arch.experts:
            ex = [f"{p}mlp.experts.{e}." for e in range(arch.experts)]
            out[m + "mlp.router.weight"] = hf[p + "mlp.gate.weight"]
            out[m + "mlp.experts.weight1"] = np.concatenate(
                [np.concatenate([hf[e + "gate_proj.weight"], hf[e + "up_proj.weight"]], 0).T for e in ex], 0)
            out[m + "mlp.experts.weight2"] = np.concatenate([hf[e + "down_proj.weight"].T for e in ex], 0)
            out[m + "mlp.router.fi_accu"] = np.zeros(arch.experts, np.float32)
            out[m + "mlp.experts.expert_tokens"] = np.ones(arch.experts, np.float32)
        else:
            gate_up = np.stack([hf[p + "mlp.gate_proj.weight"], hf[p + "mlp.up_proj.weight"]], 1)
            out[m + "mlp.linear_fc1.weight"] = gate_up.reshape(2 * arch.ffn, -1)   # rows g0, u0, g1, ...
            out[m + "mlp.linear_fc2.weight"] = hf[p + "mlp.down_proj.weight"]
    out.update({"adam_m." + k: np.zeros_like(a) for k, a in list(out.items())[:2]})
    out["global_step"] = np.array([7], np.int32)
    return out


def write_checkpoint(directory: Path, step: int, weights, state, tag=None) -> Path:
    """A checkpoint as CheckpointManager publishes it (weights, state.json, manifest with sha256)."""
    path = directory / (f"step_{step:08d}" + (f"-{tag}" if tag else ""))
    path.mkdir(parents=True)
    safetensors_file.write(path / WEIGHTS, [(k, safetensors_file.tag_of(a), a.shape, lambda a=a: a)
                                            for k, a in weights.items()])
    (path / STATE).write_text(json.dumps(state))
    files = {n: _describe(path / n) for n in (WEIGHTS, STATE)}
    (path / MANIFEST).write_text(json.dumps({"version": 1, "step": step, "tag": tag, "created": float(step),
                                             "config_hash": "", "files": files}))
    return path


@pytest.fixture
def make_run(tmp_path, compose_many, sp_model):
    """make_run(overrides, steps) -> (run_dir, arch, {step: hf weights}): a run dir as our loop leaves
    it: the frozen config.yaml, checkpoints, and the tokenizer in the run's data cache."""
    def make(overrides=(), steps=(10,), tags=()):
        run = tmp_path / "run"
        cache = tmp_path / "cache"
        tok_dir = cache / "tokenizers" / file_sha256(sp_model)[:16]
        tok_dir.mkdir(parents=True, exist_ok=True)
        (tok_dir / "tokenizer.model").write_bytes(sp_model.read_bytes())
        cfg = compose_many([*SHRINK, *overrides, f"run_dir={run}", f"data.cache_dir={cache}"])
        run.mkdir()
        (run / "config.yaml").write_text(frozen.text(cfg))
        try:
            arch = architecture.of(cfg.model)
        except PretrainConfigError:   # a model export refuses: any checkpoint will do
            arch = architecture.of(compose_many(list(SHRINK)).model)
        state = {"data": {"tokenizer": file_sha256(sp_model)[:16]}, "phase": "general"}
        made = {}
        for n, step in enumerate(steps):
            made[step] = hf_random(arch, np.random.default_rng(step))
            tag = tags[n] if n < len(tags) else None
            write_checkpoint(run / "checkpoints", step, to_mcore(arch, made[step]), state, tag)
        return run, arch, made
    return make


def export(run, to, *args, env=None, module=("pretrain.export",)):
    return cli.run(*module[1:], str(run), "--to", str(to), *args, cwd=run.parent, module=module[0],
                   cache=run.parent / "pcache", env=env, timeout=300)


QWEN3_TIED = ["model.arch=qwen3", "model.qk_layernorm=true", "model.tie_embeddings=true"]


@pytest.mark.parametrize("overrides", [
    [],   # the default suite runs llama's; the other architectures (2-4 s each) run with the slow suite
    pytest.param(MOE, marks=pytest.mark.slow),
    pytest.param(["model.arch=qwen3", "model.qk_layernorm=true"], marks=pytest.mark.slow),
    pytest.param(QWEN3_TIED, marks=pytest.mark.slow)], ids=["llama", "qwen3_moe", "qwen3", "qwen3_tied"])
def test_export_gives_back_exactly_the_transformers_weights_that_mindformers_fused(make_run, tmp_path,
                                                                                   overrides):
    run, arch, made = make_run(overrides, steps=(10, 20))
    proc = export(run, tmp_path / "hf")
    assert proc.returncode == 0, proc.stderr
    assert "step 20" in proc.stdout
    out = exported_weights(tmp_path / "hf")
    assert sorted(out) == sorted(made[20]), "transformers' tensors only: no optimizer state, no MoE buffers"
    for name, want in made[20].items():
        np.testing.assert_array_equal(out[name], want, err_msg=name)
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["architectures"] == [arch.hf_class]
    assert architecture.from_hf_config(config) == arch   # config.json says what trained, number for number
    assert {config["bos_token_id"], config["eos_token_id"], config["pad_token_id"]} == {2, 1, 0}
    # the safetensors package (what transformers loads with) reads our files as we wrote them
    from safetensors.numpy import load_file
    np.testing.assert_array_equal(load_file(str(tmp_path / "hf" / "model.safetensors"))["model.norm.weight"],
                                  made[20]["model.norm.weight"])


@pytest.mark.slow   # transformers' import and tokenizer conversion: ~3 s
def test_transformers_loads_the_config_and_tokenizer_with_our_ids(make_run, tmp_path, sp_model):
    pytest.importorskip("transformers")
    run, _, _ = make_run(MOE)
    assert export(run, tmp_path / "hf").returncode == 0
    result = compare_tokenizer(tmp_path / "hf", texts=(*tokenizer_files.CHECK_TEXTS, TEXT))
    assert result["config_class"] == "Qwen3MoeConfig"
    assert result["fast"]["class"] == "LlamaTokenizerFast" and result["slow"]["class"] == "LlamaTokenizer"
    assert result["fast"]["differ"] == [] and result["slow"]["differ"] == []
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    assert (tok.eos_token_id, tok.pad_token_id, tok.bos_token_id) == (1, 0, 2)
    assert tok("北京")["input_ids"][0] != tok.bos_token_id, "no BOS the model never trained on"


@pytest.mark.slow   # 3-5 s each; with the slow suite to keep the default one within 5 minutes (it took 396 s in CI)
def test_a_fast_tokenizer_that_would_encode_differently_is_left_out_with_the_reason(sp_model, tmp_path):
    """In a process of its own: the conversion imports transformers' protobuf-generated sentencepiece
    model, after which MindSpore (the later tests here) no longer imports its own protobuf modules."""
    pytest.importorskip("transformers")
    code = ("import sys; from pathlib import Path; from pretrain.export import tokenizer_files as t; "
            "t.mismatches = lambda sp, encode, texts: [texts[0]]; "
            "print(t.write(Path(sys.argv[1]), Path(sys.argv[2]), 32))")
    proc = subprocess.run([sys.executable, "-c", code, str(sp_model), str(tmp_path)], capture_output=True,
                          text=True, timeout=300, env=cli.python_env(tmp_path / "pcache"))
    assert proc.returncode == 0, proc.stderr
    assert "differently from sentencepiece" in proc.stdout
    assert not (tmp_path / "tokenizer.json").exists() and (tmp_path / "tokenizer.model").is_file()


@pytest.mark.slow   # 3-5 s each; with the slow suite to keep the default one within 5 minutes (it took 396 s in CI)
def test_a_large_model_is_sharded_with_an_index_and_bf16_is_rounded_to_nearest_even(make_run, tmp_path):
    run, _, made = make_run()
    proc = export(run, tmp_path / "hf", "--max-shard-gb", "0.0002", "--dtype", "bfloat16")
    assert proc.returncode == 0, proc.stderr
    index = json.loads((tmp_path / "hf" / "model.safetensors.index.json").read_text())
    shards = sorted(p.name for p in (tmp_path / "hf").glob("model-*.safetensors"))
    assert len(shards) > 1 and set(index["weight_map"].values()) == set(shards)
    assert sorted(index["weight_map"]) == sorted(made[10])
    assert index["metadata"]["total_size"] == sum(a.size * 2 for a in made[10].values())
    out = exported_weights(tmp_path / "hf")
    for name, want in made[10].items():
        np.testing.assert_allclose(out[name], want, rtol=2 ** -8, atol=0, err_msg=name)
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["torch_dtype"] == "bfloat16"
    ties = np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8)], np.float32)   # halfway: to even
    assert list(hf_dir.cast(ties, "F32", "BF16")) == [0x3F80, 0x3F82, 0xBF80]


@pytest.mark.slow   # 3-5 s each; with the slow suite to keep the default one within 5 minutes (it took 396 s in CI)
def test_the_newest_checkpoint_that_verifies_is_exported_and_a_named_corrupt_one_is_refused(make_run,
                                                                                             tmp_path):
    run, _, made = make_run(steps=(10, 20))
    weights = run / "checkpoints" / "step_00000020" / WEIGHTS
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0xFF
    weights.write_bytes(bytes(data))
    refused = export(run, tmp_path / "named", "--step", "20")
    assert refused.returncode == 2 and refused.stderr.startswith("error: ")
    assert "sha256" in refused.stderr and "refused" in refused.stderr
    assert len(refused.stderr.splitlines()) == 1
    assert not (tmp_path / "named").exists() and not list(tmp_path.glob(".named*"))
    fallback = export(run, tmp_path / "newest")
    assert fallback.returncode == 0 and "step_00000020 does not verify" in fallback.stderr
    np.testing.assert_array_equal(exported_weights(tmp_path / "newest")["model.norm.weight"],
                                  made[10]["model.norm.weight"])
    assert (run / "checkpoints" / "step_00000020").is_dir(), "a reader moves nothing in the run dir"


@pytest.mark.slow   # 3-5 s each; with the slow suite to keep the default one within 5 minutes (it took 396 s in CI)
def test_the_checkpoints_own_model_config_wins_over_a_rewritten_config_yaml(make_run, tmp_path):
    run, arch, _ = make_run()
    state_file = run / "checkpoints" / "step_00000010" / STATE
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg["model"]["rope_theta"] = 500000.0   # what the checkpoint was trained with
    state = {**json.loads(state_file.read_text()), "config": cfg}
    weights = to_mcore(arch, hf_random(arch, np.random.default_rng(1)))
    write_checkpoint(run / "checkpoints", 20, weights, state)
    proc = export(run, tmp_path / "hf")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["rope_theta"] == 500000.0


@pytest.mark.slow   # 3-5 s each; with the slow suite to keep the default one within 5 minutes (it took 396 s in CI)
def test_a_mindformers_run_exports_the_checkpoint_its_meta_json_names(make_run, tmp_path):
    """MindFormers' layout (rank_0/<prefix>_rank_0-<epoch>_<step>.safetensors, meta.json): the file the
    trainer would resume from, its step the step_num stored in it (a resumed start's names count anew)."""
    run, arch, made = make_run(["train.engine=mindformers", "phase=general"], steps=())
    rank0 = run / "mindformers" / "general" / "checkpoint" / "rank_0"
    rank0.mkdir(parents=True)
    for n, (name_step, step_num) in enumerate([(10, 30), (5, 35)]):   # the second start wrote step 5 = 35
        hf = hf_random(arch, np.random.default_rng(n))
        weights = {**to_mcore(arch, hf), "step_num": np.array([step_num], np.int32)}
        tensors = [(k, safetensors_file.tag_of(a), a.shape, lambda a=a: a) for k, a in weights.items()]
        safetensors_file.write(rank0 / f"tiny_rank_0-1_{name_step}.safetensors", tensors)
        made[step_num] = hf
    (rank0 / "meta.json").write_text(json.dumps({"last_epoch": 1, "last_step": 5,
                                                 "last_ckpt_file": "tiny_rank_0-1_5.safetensors"}))
    assert export(run, tmp_path / "newest").returncode == 0
    assert export(run, tmp_path / "at30", "--step", "30").returncode == 0
    for target, step in (("newest", 35), ("at30", 30)):
        provenance = json.loads((tmp_path / target / "pretrain_export.json").read_text())
        assert provenance["engine"] == "mindformers" and provenance["step"] == step
        assert provenance["sha256_verified"] is False   # MindFormers writes no checksums
        out = exported_weights(tmp_path / target)
        assert sorted(out) == sorted(made[step])
        np.testing.assert_array_equal(out["lm_head.weight"], made[step]["lm_head.weight"])


@pytest.mark.slow   # 2.5-4 s: the default suite keeps under 5 minutes
def test_phase_selects_the_phase_final_checkpoint_through_the_pretrain_cli(make_run, tmp_path):
    run, _, made = make_run(steps=(10, 20), tags=("phase-general-final",))
    proc = export(run, tmp_path / "hf", "--phase", "general", module=("pretrain", "export"))
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(exported_weights(tmp_path / "hf")["lm_head.weight"],
                                  made[10]["lm_head.weight"])
    provenance = json.loads((tmp_path / "hf" / "pretrain_export.json").read_text())
    assert provenance["step"] == 10 and provenance["sha256_verified"] is True


@pytest.mark.parametrize("case, words", [
    ("no_checkpoint", "no checkpoint to export"),
    ("sandwich", "sandwich norm"),
    ("llama_qk_norm", "no transformers class"),
    ("target_not_empty", "is not empty"),
    ("all_corrupt", "verifies, nothing exported"),
    ("step_missing", "no checkpoint of that step"),
    ("wrong_tokenizer", "not the tokenizer the checkpoint was trained with"),
    ("mindformers_tp_shards", "merge them first"),
])
def test_refusals_are_one_line_exit_2_and_write_nothing(make_run, tmp_path, case, words):
    overrides = {"sandwich": ["model.sandwich_norm=true"], "llama_qk_norm": ["model.qk_layernorm=true"],
                 "mindformers_tp_shards": ["parallel=dp8tp4pp2", "hardware=ascend910b_8x8"]}
    run, _, _ = make_run(overrides.get(case, []), steps=() if case == "no_checkpoint" else (10,))
    target, args = tmp_path / "hf", []
    if case == "target_not_empty":
        target.mkdir()
        (target / "keep.txt").write_text("mine")
    if case == "all_corrupt":
        (run / "checkpoints" / "step_00000010" / STATE).write_text("{}")
    if case == "step_missing":
        args = ["--step", "5"]
    if case == "wrong_tokenizer":
        other = tmp_path / "other.model"
        other.write_bytes(b"not the run's")
        args = ["--tokenizer", str(other)]
    proc = export(run, target, *args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.startswith("error: ") and words in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert "Traceback" not in proc.stderr
    expected = ["keep.txt"] if case == "target_not_empty" else None
    assert (sorted(p.name for p in target.iterdir()) if target.exists() else None) == expected
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".hf")], "no temporary directory left"


def test_a_write_that_fails_midway_is_one_line_and_leaves_nothing(make_run, tmp_path):
    """The disk refusing bytes (RLIMIT_FSIZE: writes past 64 KiB fail with EFBIG) while the weights are
    written: exit 2, no target, no temporary directory."""
    run, _, _ = make_run()
    limit = "import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536)); "
    proc = subprocess.run([sys.executable, "-c", limit + "import signal; signal.signal(signal.SIGXFSZ, "
                           "signal.SIG_IGN); sys.argv = sys.argv[1:]; runpy.run_module('pretrain.export', "
                           "run_name='__main__')", "x", str(run), "--to", str(tmp_path / "hf")],
                          capture_output=True, text=True, env=cli.python_env(run.parent / "pcache"), timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: ") and "nothing was written" in proc.stderr
    assert len(proc.stderr.splitlines()) == 1
    assert not (tmp_path / "hf").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".hf")]


# ---------------------------------------------------------------- MindSpore vs the NumPy reference
def mindspore_vs_reference(tmp_path, make_run, overrides):
    """Max abs logits difference of our MindSpore model (weights of the run's checkpoint) vs the NumPy
    reference reading only the exported directory."""
    from pretrain.export.check import compare_logits

    run, _, _ = make_run(overrides)
    assert export(run, tmp_path / "hf").returncode == 0
    return compare_logits(run, tmp_path / "hf")


@pytest.mark.slow   # each builds and runs a MindSpore model: ~5-10 s
@pytest.mark.parametrize("overrides", [[], MOE, QWEN3_TIED], ids=["llama", "qwen3_moe", "qwen3_tied"])
def test_numpy_reference_of_the_export_equals_our_mindspore_logits(mindformers_scratch, compose_many,
                                                                    tmp_path, make_run, overrides):
    result = mindspore_vs_reference(tmp_path, make_run, overrides)
    print(json.dumps(result))   # the figures, with -s
    assert result["logits_max_abs"] > 1.0, "logits large enough that a wrong weight would show"
    assert within_noise(result), result   # as close as float32 arithmetic of the reference itself
    assert result["float32_noise"] < 1e-3 * result["logits_max_abs"]
    assert result["argmax_agree"] == 1.0


def test_reference_is_sensitive_to_what_the_export_could_get_wrong(make_run, tmp_path):
    """The comparison would catch a swapped q/k split, a missing transpose or a wrong rope_theta."""
    run, arch, made = make_run(["model.arch=qwen3", "model.qk_layernorm=true"])
    tokens = np.arange(24, dtype=np.int32).reshape(2, 12) * 7 % arch.vocab
    good = reference.logits(arch, made[10], tokens)
    q, k = "model.layers.0.self_attn.q_norm.weight", "model.layers.0.self_attn.k_norm.weight"
    swapped = dict(made[10], **{q: made[10][k], k: made[10][q]})
    assert np.abs(reference.logits(arch, swapped, tokens) - good).max() > 1e-3
    other_theta = architecture.Architecture(**{**arch.__dict__, "rope_theta": arch.rope_theta * 10})
    assert np.abs(reference.logits(other_theta, made[10], tokens) - good).max() > 1e-3


# ---------------------------------------------------------------- real runs (slow)
def train(data_cache, tmp_path, *overrides):
    run = tmp_path / "run"
    cli.run(*overrides, f"run_dir={run}", cwd=tmp_path, cache=data_cache, timeout=900, check=True)
    return run


def corpus_sample(cache, per_source=150):
    """Documents spread over each cleaned source of the sample corpus (English, Chinese, code)."""
    from pretrain.data.docstore import DocStore
    docs = []
    for directory in sorted(Path(cache).glob("clean/*/")):
        store = DocStore(directory)
        for i in np.linspace(0, len(store) - 1, min(per_source, len(store))).astype(int):
            docs += store.texts(int(i), int(i) + 1)
    return docs


def check(run, export_dir):
    proc = cli.run(str(run), str(export_dir), cwd=run.parent, module="pretrain.export.check",
                   cache=run.parent / "pcache", timeout=600)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 0, result
    return result


@pytest.mark.slow
def test_the_default_job_exports_with_its_logits_and_its_chinese_english_tokenizer(data_cache, tmp_path):
    """A real short run of the default job (three phases, the sample corpus and its 4096-piece
    tokenizer): the final checkpoint exported, its logits and tokenizer ids checked."""
    run = train(data_cache, tmp_path, "train.total_tokens=60000", "train.eval_every=0")
    proc = export(run, tmp_path / "hf")
    assert proc.returncode == 0, proc.stderr
    assert "phase-anneal-final" in proc.stdout
    result = check(run, tmp_path / "hf")
    assert within_noise(result) and result["argmax_agree"] == 1.0, result
    chinese = [t for t in tokenizer_files.CHECK_TEXTS if "中" in t or "北" in t]
    assert chinese and result["tokenizer"]["fast"]["differ"] == [] == result["tokenizer"]["slow"]["differ"]
    # more text than the check texts: the run's own corpus, English and Chinese documents
    import sentencepiece as spm
    from transformers import AutoTokenizer
    docs = corpus_sample(data_cache)
    assert sum(any("\u4e00" <= c <= "\u9fff" for c in d) for d in docs) > 20, "Chinese documents among them"
    sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "hf" / "tokenizer.model"))
    fast = AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    assert not tokenizer_files.mismatches(sp, lambda t: fast(t, add_special_tokens=False)["input_ids"], docs)


@pytest.mark.slow
def test_a_mindformers_engine_run_exports_rank_0s_checkpoint(data_cache, tmp_path):
    from tests.helpers.models import SMALL_MODEL
    run = train(data_cache, tmp_path, "phase=general", "train.engine=mindformers", *SMALL_MODEL,
                "train.eval_every=0", "train.total_tokens=15000", "train.save_every_steps=10")
    proc = export(run, tmp_path / "hf")
    assert proc.returncode == 0, proc.stderr
    provenance = json.loads((tmp_path / "hf" / "pretrain_export.json").read_text())
    assert provenance["engine"] == "mindformers" and provenance["sha256_verified"] is False
    result = check(run, tmp_path / "hf")
    assert within_noise(result) and result["argmax_agree"] == 1.0, result
