"""mindformers.yaml export: every model option loads through MindFormers' own config classes and
means the architecture we configured."""

import math
import os

import pytest
from pretrain.model import mindformers_config as mfc
from tests.helpers.repo import REPO

MODELS = sorted(p.stem for p in (REPO / "conf" / "model").glob("*.yaml"))


def exported(cfg):
    phase = cfg.phase.general if "general" in cfg.phase else cfg.phase
    return mfc.export(
        cfg, first_phase=phase, first_phase_steps=100, first_phase_peak=float(cfg.train.lr_peak)
    )


@pytest.mark.parametrize("model", MODELS)
def test_every_model_exports_a_config_mindformers_loads_as_that_architecture(
    model, compose_many, mindformers, tmp_path
):
    from mindformers.models.build_config import get_model_config
    from mindformers.tools.register import MindFormerConfig

    hardware = "cpu" if model == "tiny" else "ascend910b_8x8"
    cfg = compose_many([f"model={model}", f"hardware={hardware}"])
    path = tmp_path / "mindformers.yaml"
    path.write_text(mfc.to_yaml(exported(cfg)))
    loaded = MindFormerConfig(str(path))
    assert loaded.model.model_config.model_type == mfc.model_class(cfg.model)[0]
    assert loaded.lr_schedule.total_steps == 100 and loaded.optimizer.type == "AdamW"
    assert loaded.context.device_target == ("CPU" if hardware == "cpu" else "Ascend")

    hf_config = get_model_config(loaded.model)
    t = hf_config.convert_to_transformer_config()
    m = cfg.model
    assert (t.num_layers, t.hidden_size, t.num_attention_heads, t.num_query_groups, t.ffn_hidden_size) == (
        m.num_layers,
        m.hidden_size,
        m.num_heads,
        m.num_kv_heads,
        m.ffn_hidden_size,
    )
    assert t.kv_channels == (m.head_dim or m.hidden_size // m.num_heads)
    assert t.vocab_size == m.vocab_size and t.rotary_base == m.rope_theta
    assert t.layernorm_epsilon == pytest.approx(m.norm_eps)
    assert t.qk_layernorm == m.qk_layernorm and t.tie_word_embeddings == m.tie_embeddings
    assert t.gated_linear_unit and t.hidden_act == "silu" and not t.add_bias_linear
    assert t.use_flash_attention == (hardware != "cpu")
    if m.init_method == "tiny":  # Pangu Ultra's TinyInit, also on the output projections
        std = math.sqrt(1 / (2 * m.hidden_size * m.num_layers))
        assert t.init_method_std == pytest.approx(std)
        assert [r["init_method_std"] for r in t.param_init_std_rules] == [pytest.approx(std)]
        assert t.param_init_std_rules[0]["target"].match(
            "decoder.layers.93.self_attention.linear_proj.weight"
        )
    else:
        assert t.init_method_std == pytest.approx(m.init_std)
    assert bool(t.sandwich_norm) == bool(m.sandwich_norm)
    # packed documents: MindFormers' own switches, and the inputs that feed them
    mode = mfc.document_attention(cfg)
    assert mode == ("mask" if hardware == "cpu" else "compressed")
    assert t.calculate_per_token_loss and loaded.calculate_per_token_loss
    assert t.use_eod_reset and bool(t.use_eod_attn_mask_compression) == (mode == "compressed")
    if mode == "compressed":  # flash attention over the flat batch, cut at actual_seq_len
        assert (t.input_layout, t.sparse_mode) == ("TND", 3)
    assert list(loaded.train_dataset.input_columns) == mfc.input_columns(cfg)
    assert list(loaded.train_dataset.construct_args_key) == mfc.input_columns(cfg)
    if m.num_experts:
        assert (t.num_moe_experts, t.moe_router_topk, t.moe_ffn_hidden_size) == (
            m.num_experts,
            m.num_experts_per_token,
            m.moe_ffn_hidden_size,
        )
    else:
        assert not t.num_moe_experts


def test_export_module_stays_free_of_mindspore():
    import subprocess
    import sys

    code = (
        "import sys; from pretrain.config.compose import compose; "
        "from pretrain.model import mindformers_config as m; c = compose([]); "
        "m.to_yaml(m.export(c, first_phase=c.phase.general, first_phase_steps=3, first_phase_peak=1e-3)); "
        "assert 'mindspore' not in sys.modules and 'mindformers' not in sys.modules"
    )
    repo = str(REPO)
    subprocess.run([sys.executable, "-c", code], check=True, cwd=repo, env={**os.environ, "PYTHONPATH": repo})
