"""A corpus too small for any validation rows (issue 27). Before: `python -m pretrain.data` exited 0
without a word, then training refused "dataset 'general' has no val rows" even with
train.eval_every=0. Now the data step notes it, train.eval_every=0 trains without validation (one
line says so), and periodic validation is refused naming that fix."""
import pytest

from pretrain.config.errors import PretrainDataError
from pretrain.config.resolved import ResolvedRun
from pretrain.data.manifest import summary_table
from pretrain.data.prepare import prepare
from pretrain.train.build import val_loader
from tests.helpers.data_files import data_cfg, paragraphs, write_jsonl


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    src = write_jsonl(root / "a.jsonl", paragraphs()[:60])
    cfg = data_cfg(root / "cache", {"general": [src]}, val_fraction=0.001)
    return cfg, prepare(cfg, progress=False)


def test_the_data_step_notes_a_dataset_without_validation_rows(tiny):
    cfg, prepared = tiny
    assert prepared["general"].manifest["val"]["rows"] == 0
    note = summary_table(prepared, float(cfg.val_fraction)).splitlines()[-2]
    assert note.startswith("note: general: no validation rows") and "train.eval_every=0" in note
    assert "note:" not in summary_table(prepared, 0.0)        # no held-out split asked for: nothing to say


def test_eval_every_0_trains_without_validation_and_periodic_validation_names_it(tiny, compose_many, capsys):
    data, prepared = tiny
    cfg = compose_many(["phase=general", "train.eval_every=0"])
    cfg.data = data
    run = ResolvedRun.of(cfg)
    assert val_loader(run, prepared, run.phases[0], 0, 1) is None
    assert "note: phase general: general has no validation rows" in capsys.readouterr().out
    cfg.train.eval_every = 50
    run = ResolvedRun.of(cfg)
    with pytest.raises(PretrainDataError, match=r"no validation rows .*set train\.eval_every=0 to train"):
        val_loader(run, prepared, run.phases[0], 0, 1)
