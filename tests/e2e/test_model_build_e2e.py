"""The real MindFormers Mcore network, built on CPU: by the trainer's builder, and by MindFormers
itself from the exported mindformers.yaml. Same parameters, and as many as the planner's F1."""

import math

import numpy as np
import pytest

from pretrain.config import validate
from pretrain.model import builder
from pretrain.model import mindformers_config as mfc
from pretrain.plan.planner import model_shape, param_count
from tests.helpers.models import SHRINK

SHRINK = [*SHRINK, "model.head_dim=16"]


@pytest.fixture(scope="module")
def runtime(mindformers_scratch):
    import mindspore as ms

    ms.set_seed(0)
    return mindformers_scratch

def build_from_exported_yaml(cfg, path):
    """What a MindFormers user does with run_dir/mindformers.yaml: MindFormerConfig + build_network."""
    from mindformers.models.build_model import build_network
    from mindformers.tools.register import MindFormerConfig

    path.write_text(
        mfc.to_yaml(
            mfc.export(cfg, first_phase=cfg.phase.general, first_phase_steps=10, first_phase_peak=1e-3)
        )
    )
    loaded = MindFormerConfig(str(path))
    return build_network(loaded.model)


def names_and_sizes(net):
    return {p.name: tuple(p.shape) for p in net.trainable_params()}


def test_the_exported_yaml_builds_the_trainers_model_with_the_planners_parameter_count(
    runtime, compose_many, tmp_path
):
    cfg = compose_many([])  # the default: model=tiny on hardware=cpu
    trained = builder.build_model(cfg)
    assert type(trained).__name__ == "TrainingTeleChat3ForCausalLM"
    from_yaml = build_from_exported_yaml(cfg, tmp_path / "mindformers.yaml")
    assert type(from_yaml) is type(trained)
    assert names_and_sizes(from_yaml) == names_and_sizes(trained)
    count = sum(int(np.prod(s)) for s in names_and_sizes(trained).values())
    assert count == param_count(model_shape(cfg.model)).total
    assert 1e6 < count < 1e7  # "a few million parameters"
    # Llama layout: no QK-norm, GQA packed into one qkv projection of (heads + 2·kv_heads)·head_dim rows
    names = names_and_sizes(trained)
    assert not any("q_layernorm" in n for n in names)
    head_dim = cfg.model.hidden_size // cfg.model.num_heads
    assert names["decoder.layers.0.self_attention.linear_qkv.weight"] == (
        (cfg.model.num_heads + 2 * cfg.model.num_kv_heads) * head_dim,
        cfg.model.hidden_size,
    )
    assert names["output_layer.weight"] == (cfg.model.vocab_size, cfg.model.hidden_size)


@pytest.mark.parametrize(
    "overrides",
    [["model=qwen3_8b"], ["model=qwen3_8b", "model.tie_embeddings=true"]],
    ids=["qwen3", "qwen3-tied"],
)
def test_shrunken_qwen3_builds_with_qk_norm_and_optional_tied_head(
    overrides, runtime, compose_many, tmp_path
):
    cfg = compose_many(overrides + SHRINK)
    net = builder.build_model(cfg)
    names = names_and_sizes(net)
    assert "decoder.layers.1.self_attention.k_layernorm.weight" in names
    assert ("output_layer.weight" in names) != cfg.model.tie_embeddings
    assert sum(int(np.prod(s)) for s in names.values()) == param_count(model_shape(cfg.model)).total
    assert names_and_sizes(build_from_exported_yaml(cfg, tmp_path / "m.yaml")) == names


def test_shrunken_pangu_uses_tinyinit_everywhere(runtime, compose_many):
    cfg = compose_many(
        ["model=pangu_ultra_135b", "model.sandwich_norm=false"] + SHRINK + ["model.num_layers=8"]
    )
    net = builder.build_model(cfg)
    std = math.sqrt(1 / (2 * 64 * 8))
    for p in net.trainable_params():
        if len(p.shape) == 2:  # incl. linear_proj / linear_fc2, which Megatron's default would shrink by 1/4
            assert p.asnumpy().std() == pytest.approx(std, rel=0.1), p.name


def test_shrunken_moe_builds_on_cpu_with_the_planners_count_and_trains_there(runtime, compose_many):
    # trained in tests/test_model_moe_cpu.py (CPU experts: pretrain/model/cpu_compat.py)
    cfg = compose_many(
        [
            "model=qwen3_30b_a3b",
            "model.num_experts=4",
            "model.num_experts_per_token=2",
            "model.moe_ffn_hidden_size=32",
        ]
        + SHRINK
    )
    validate.check_trainable(cfg)
    builder.init_runtime(cfg)
    net = builder.build_from_block(mfc.model_config(cfg))
    assert type(net).__name__ == "TrainingQwen3MoeForCausalLM"
    assert sum(int(p.size) for p in net.trainable_params()) == param_count(model_shape(cfg.model)).total
