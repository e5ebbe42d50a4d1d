"""Issue 27: a path-valued key that cannot be a path (a 100 KB override value) is one line naming the
key, not `OSError: File name too long` with ~300 KB of output from wherever it was first stat'ed."""
import pytest

from pretrain.config import validate

LONG = "a" * 100_000


@pytest.mark.parametrize("override, key", [
    (f"train.init_from={LONG}", "train.init_from"),
    (f"run_dir=/tmp/{LONG}", "run_dir"),
    (f"data.cache_dir={'d/' * 2100}", "data.cache_dir"),     # short names, too long a path
    (f"data.tokenizer.path={LONG}.model", "data.tokenizer.path"),
])
def test_a_value_too_long_for_a_path_is_one_line_naming_its_key(compose_many, override, key):
    found = validate.problems(compose_many(["phase=reasoning", override]))
    assert len(found) == 1 and found[0].startswith(f"{key}=") and "cannot be a path" in found[0]
    assert len(found[0]) < 300


def test_a_source_path_too_long_is_refused_by_the_data_step_too(compose_many):
    cfg = compose_many(["data=files", f"data.sources.general.paths=[{LONG}]"])
    assert validate.missing_files(cfg.data) == []      # no stat of it: it would raise ENAMETOOLONG
    with pytest.raises(validate.PretrainConfigError, match=r"^data.sources.general.paths='a{40}\.\.\. "
                                                           r"\(100000 bytes\)' cannot be a path"):
        validate.check_data_config(cfg.data)
