"""mindformers.yaml export: every model option loads through MindFormers' own config classes and
means the architecture we configured."""

import pytest

from pretrain.config import validate
from pretrain.model import mindformers_config as mfc
from pretrain.train.schedule import phase_lr


def exported(cfg):
    phase = cfg.phase.general if "general" in cfg.phase else cfg.phase
    return mfc.export(
        cfg, first_phase=phase, first_phase_steps=100, first_phase_peak=float(cfg.train.lr_peak)
    )


def test_layouts_map_onto_mindformers_parallel_sections(compose_many):
    cfg = compose_many(["model=llama3_70b", "parallel=dp8tp4pp2", "hardware=ascend910b_8x8"])
    out = exported(cfg)
    assert out["use_parallel"] is True
    assert out["parallel"]["parallel_mode"] == 1  # model split: semi-auto parallel
    pc = out["parallel_config"]
    assert (pc["data_parallel"], pc["model_parallel"], pc["pipeline_stage"]) == (8, 4, 2)
    assert pc["micro_batch_num"] == cfg.train.grad_accum and pc["use_seq_parallel"] is True
    assert out["recompute_config"]["select_recompute"] is True
    assert out["model"]["model_config"]["compute_dtype"] == "bfloat16"
    assert out["runner_wrapper"]["scale_sense"]["type"] == "DynamicLossScaleUpdateCell"

    tiny = exported(compose_many([]))
    assert tiny["use_parallel"] is False and tiny["parallel"]["parallel_mode"] == 0
    assert tiny["runner_wrapper"]["scale_sense"] == 1.0
    assert tiny["model"]["model_config"]["compute_dtype"] == "float32"


def test_document_mask_switches_and_inputs_follow_data_document_mask(compose_many):
    cpu = compose_many([])
    assert cpu.data.document_mask is True  # the default
    block = mfc.model_config(cpu)
    assert block["use_eod_reset"] and block["calculate_per_token_loss"]
    assert "use_eod_attn_mask_compression" not in block  # needs flash attention: CPU feeds the mask
    assert mfc.input_columns(cpu)[-2:] == ["position_ids", "attention_mask"]
    off = compose_many(["data.document_mask=false"])
    assert mfc.document_attention(off) == "off" and "use_eod_reset" not in mfc.model_config(off)
    assert mfc.model_config(off)["calculate_per_token_loss"]  # token-weighted either way
    assert mfc.input_columns(off) == list(mfc.INPUT_COLUMNS)
    short = compose_many(["model=llama3_8b", "hardware=ascend910b_1x8", "model.seq_length=1024"])
    assert mfc.document_attention(short) == "mask"  # MindFormers compresses masks from 2048 only
    semi = compose_many(["model=llama3_70b", "hardware=ascend910b_8x8", "parallel=dp2tp4pp8vpp2"])
    strategy = mfc.parallel_blocks(semi)["parallel"]["dataset_strategy"]
    assert len(strategy) == len(mfc.input_columns(semi)) == 5 and strategy[-1] == [2, 1]  # actual_seq_len


def test_lr_schedule_export_uses_mindformers_class_names(compose_many):
    cfg = compose_many([])
    general = cfg.phase.general
    block = mfc.lr_schedule_block(general, 200, 1e-3)
    assert block == {
        "type": "CosineWithWarmUpLR",
        "learning_rate": 1e-3,
        "warmup_steps": 10,
        "total_steps": 200,
        "lr_end": pytest.approx(0.3e-3),  # general decays to 0.3 x its peak
    }
    wsd = compose_many(["phase.general.lr.schedule=wsd"]).phase.general
    assert mfc.lr_schedule_block(wsd, 200, 1e-3)["decay_start_steps"] == 160
    assert phase_lr("general", 200, general.lr, 0.0).warmup_steps == block["warmup_steps"]


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["model=qwen3_8b", "model.qk_layernorm=false"], "always builds QK-norm"),
        (["model.tie_embeddings=true"], "never ties the head"),
        (["model.arch=gpt2"], "model.arch='gpt2' must be one of llama, qwen3"),
        (["model.init_method=xavier"], "model.init_method='xavier' must be normal or tiny"),
    ],
)
def test_architectures_mindformers_cannot_train_are_refused_with_the_key(overrides, message, compose_many):
    cfg = compose_many(overrides)
    assert any(message in line for line in validate.problems(cfg) + validate.training_problems(cfg))
