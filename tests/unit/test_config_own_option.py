"""A user's own option without its `defaults:` line (issue 40): README invites `--config-dir DIR` with
`DIR/model/mine.yaml`; one holding only `name` and `hidden_size` leaves the model schema's other
mandatory keys unset. One line names all of them and the `defaults:` line that fixes it, exit 2,
nothing written; in a sweep it is that job's row. And the line's fix composes a valid config."""

import pytest

from pretrain.config import validate
from pretrain.config.compose import compose
from pretrain.config.errors import PretrainConfigError
from tests.helpers.own_option import MINE, assert_unset_line, own_option_dir


@pytest.fixture
def own(tmp_path):
    return own_option_dir(tmp_path)


def test_the_named_defaults_line_fixes_it(own):
    searched = f"hydra.searchpath=[file://{own}]"
    (line,) = validate.problems(compose([searched, "model=mine"]))
    assert_unset_line(line)
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
