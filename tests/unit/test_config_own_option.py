"""A user's own option without its `defaults:` line (issue 40): README invites `--config-dir DIR` with
`DIR/model/mine.yaml`; one holding only `name` and `hidden_size` leaves the model schema's other
mandatory keys unset. One line names all of them and the `defaults:` line that fixes it, exit 2,
nothing written; in a sweep it is that job's row. And the line's fix composes a valid config."""

import pytest

from pretrain.config import validate
from pretrain.config.compose import compose
from pretrain.config.errors import PretrainConfigError

MINE = "name: mine\nhidden_size: 128\n"
# every mandatory (???) key of the model schema that MINE does not set, in the schema's order
UNSET = ["model.num_layers", "model.num_heads", "model.num_kv_heads", "model.ffn_hidden_size",
         "model.vocab_size", "model.seq_length", "model.max_position_embeddings", "model.global_batch_size",
         "model.total_tokens", "model.lr_peak"]
FIX = "`defaults: [tiny, _self_]`"


@pytest.fixture
def own(tmp_path):
    """DIR with model/mine.yaml (name and hidden_size only) and data/mine.yaml (a name and a source)."""
    conf = tmp_path / "myconf"
    (conf / "model").mkdir(parents=True)
    (conf / "model" / "mine.yaml").write_text(MINE)
    (conf / "data").mkdir()
    (conf / "data" / "mine.yaml").write_text("name: mine\nsources:\n  general:\n    builtin: general\n")
    return conf


def _unset_line(text: str) -> None:
    said = f"model=mine leaves {len(UNSET)} keys of the model schema unset: {', '.join(UNSET)}; "
    assert said in text, text
    assert FIX in text and "available: llama3_70b, llama3_8b" in text, text


def test_the_named_defaults_line_fixes_it(own):
    searched = f"hydra.searchpath=[file://{own}]"
    (line,) = validate.problems(compose([searched, "model=mine"]))
    _unset_line(line)
    (own / "model" / "mine.yaml").write_text(f"defaults: [tiny, _self_]\n{MINE}")
    cfg = compose([searched, "model=mine"])
    assert validate.problems(cfg) == []
    assert (cfg.model.name, cfg.model.hidden_size, cfg.model.num_layers) == ("mine", 128, 4)


def test_other_unset_keys_are_named_with_their_fix(own):
    """A data option alone (pretrain.data's rules), and keys unset by an override of a package option."""
    with pytest.raises(PretrainConfigError) as data:
        validate.check_data_config(compose([f"hydra.searchpath=[file://{own}]", "data=mine"]).data)
    assert ("data=mine leaves 4 keys of the data schema unset: data.sources.general.paths, data.cache_dir, "
            "data.tokenizer.vocab_size, data.seq_length; start its file (data/mine.yaml) with "
            "`defaults: [sample, _self_]`") in str(data.value)
    # tiny is the package's: no file of the user's to extend, so the fix is to set the key
    assert validate.problems(compose(["model.num_layers=???", "train.lr_peak=???"])) == [
        "model.num_layers: unset (???); set it (e.g. model.num_layers=...)",
        "train.lr_peak: unset (???); set it (e.g. train.lr_peak=...)"]
