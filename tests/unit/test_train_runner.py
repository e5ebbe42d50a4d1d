"""Runner checks that need no model: data that does not fit the model fails with both values."""

from pathlib import Path

import pytest

from pretrain.config.errors import PretrainDataError
from pretrain.data.prepare import Prepared
from pretrain.data.checks import check_prepared as check_data
from pretrain.resilience.identity import architecture, architecture_hash
from pretrain.train.build import pad_token_id


@pytest.fixture(scope="module")
def tokenizer_300(tmp_path_factory):
    """A real sentencepiece model of 300 pieces (pad 0, eos 1)."""
    import sentencepiece as spm

    d = tmp_path_factory.mktemp("tok")
    text = d / "text.txt"
    text.write_text(
        "\n".join(f"line {i}: the quick brown fox jumps over {i * 7 % 13} lazy dogs" for i in range(400))
    )
    spm.SentencePieceTrainer.train(
        input=str(text),
        model_prefix=str(d / "m"),
        vocab_size=300,
        pad_id=0,
        eos_id=1,
        bos_id=2,
        unk_id=3,
        byte_fallback=True,
        minloglevel=2,
    )
    return d / "m.model"


def prepared(tokenizer, seq_length=256, name="general"):
    return {name: Prepared(name, Path("/data") / name, {}, Path(tokenizer), [], [], seq_length, 1)}


def test_a_tokenizer_of_another_vocabulary_is_named_with_both_sizes(tokenizer_300, compose_many):
    cfg = compose_many([])
    with pytest.raises(PretrainDataError, match=r"has a vocabulary of 300, model.vocab_size is 4096") as err:
        check_data(cfg, prepared(tokenizer_300))
    assert "\n" not in str(err.value) and str(tokenizer_300) in str(err.value)
    check_data(
        compose_many(["model.vocab_size=300", "data.tokenizer.vocab_size=300"]), prepared(tokenizer_300)
    )


def test_a_dataset_packed_for_another_length_is_named_with_both_lengths(tokenizer_300, compose_many):
    cfg = compose_many(["model.vocab_size=300"])
    with pytest.raises(
        PretrainDataError,
        match=r"dataset general in /data/general is packed for seq_length 128, "
        r"model.seq_length is 256",
    ):
        check_data(cfg, prepared(tokenizer_300, seq_length=128))


def test_padding_id_comes_from_the_tokenizer(tokenizer_300):
    assert pad_token_id(str(tokenizer_300)) == 0


def test_architecture_is_what_a_checkpoint_must_share(compose_many):
    base = architecture(compose_many([]))
    assert base["hidden_size"] == 256 and "lr_peak" not in base and "total_tokens" not in base
    assert architecture(compose_many(["model.lr_peak=3e-4", "model.total_tokens=1e6"])) == base
    changed = architecture(compose_many(["model.num_kv_heads=4"]))
    assert changed != base and architecture_hash(changed) != architecture_hash(base)
