"""The real MindFormers Mcore network, built on CPU: by the trainer's builder, and by MindFormers
itself from the exported mindformers.yaml. Same parameters, and as many as the planner's F1."""
import pytest

from pretrain.config import validate
from pretrain.config.errors import PretrainConfigError
from pretrain.model import mindformers_config as mfc
from tests.helpers.models import SHRINK

SHRINK = [*SHRINK, "model.head_dim=16"]


def test_sandwich_norm_trains_on_the_llama_layout_only(compose_many):
    cfg = compose_many(["model=pangu_ultra_135b"] + SHRINK)
    # built and trained in tests/test_model_sandwich.py
    assert mfc.model_config(cfg)["architectures"] == ["PanguUltraForCausalLM"]
    validate.check_trainable(cfg)
    with pytest.raises(PretrainConfigError, match="model.sandwich_norm=true with model.arch=qwen3"):
        validate.check_trainable(compose_many(["model=qwen3_8b", "model.sandwich_norm=true"] + SHRINK))
