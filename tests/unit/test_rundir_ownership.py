"""Issue 27: nothing of the user's is overwritten. A run dir is pretrain's only when it is new, empty,
carries RUN_DIR/.pretrain-run, or is a run dir an earlier pretrain made (its frozen config.yaml);
anything else is refused in one line, exit 2, before a byte is written or moved. Before: an unrelated
directory's config.yaml, metrics.jsonl, plan.json, summary.json, loss_curve.png and checkpoints/latest
were overwritten, its checkpoints/step_00000001 moved into quarantine; and every command, refused and
invalid ones and dry runs included, wrote (or rewrote) runs/<name>/.hydra/."""

import pytest

from pretrain.config.errors import PretrainRunError
from pretrain.rundir import MARKER, claim


def test_claim_takes_new_empty_and_marked_dirs_only(tmp_path):
    claim(tmp_path / "new")
    (tmp_path / "empty").mkdir()
    claim(tmp_path / "empty")
    assert (tmp_path / "new" / MARKER).is_file() and (tmp_path / "empty" / MARKER).is_file()
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "config.yaml").write_text("model: {hidden_size: 5}\n")   # a config, not a frozen one of ours
    with pytest.raises(PretrainRunError, match="not a pretrain run dir"):
        claim(theirs)
    (theirs / MARKER).touch()                  # the user says it is one
    claim(theirs)
