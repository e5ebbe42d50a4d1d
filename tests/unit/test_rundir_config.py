"""Issue 12 item 3: the run directory keeps its truth. A rejected restart or a dry run never
overwrites the config.yaml and plan.json the checkpoints were made with; a config change against
the checkpoint's config is refused in one line listing the keys, unless every key is one a resume
may change (resume.RESUMABLE), which is accepted and recorded."""
import pytest
from omegaconf import OmegaConf
from pretrain.config.errors import PretrainRunError
from pretrain.resilience.resume import resume_changes

SAVED = {"run_dir": "runs/a", "dry_run": False, "model": {"hidden_size": 64, "num_layers": 2},
         "train": {"log_every": 1, "save_every_steps": 3, "total_tokens": 100, "keep_checkpoint_max": 3},
         "phase": {"general": {"lr": {"peak": 1e-3}}}, "resilience": {"watchdog_timeout_s": 900.0},
         "hardware": {"master_port": 8118, "devices_per_node": 1}}


def changed(**edits):
    cfg = OmegaConf.create(SAVED)
    for key, value in edits.items():
        OmegaConf.update(cfg, key.replace("__", "."), value)
    return OmegaConf.to_container(cfg)


def test_allowed_changes_are_returned_with_both_values():
    now = changed(train__log_every=5, train__keep_checkpoint_max=9, phase__general__lr__peak=3e-4,
                  resilience__watchdog_timeout_s=60.0, hardware__master_port=9000)
    assert resume_changes(SAVED, now, "ckpt") == [
        ("hardware.master_port", 8118, 9000), ("phase.general.lr.peak", 1e-3, 3e-4),
        ("resilience.watchdog_timeout_s", 900.0, 60.0), ("train.keep_checkpoint_max", 3, 9),
        ("train.log_every", 1, 5)]


def test_a_key_the_checkpoint_lacks_is_refused_unless_a_data_change_is_allowed():
    """Issue 27: a key absent from the checkpoint's config (a newer pretrain's, or added with +) was
    "allowed on resume"; what the checkpoint trained with is unknown, so it is a data change now."""
    now = changed(data__document_mask=True)
    with pytest.raises(PretrainRunError, match=r"data.document_mask \('<absent>' -> True\).*"
                                               r"resilience.allow_data_change=true accepts it"):
        resume_changes(SAVED, now, "ckpt")
    deliberate = changed(data__document_mask=True, resilience__allow_data_change=True)
    assert resume_changes(SAVED, deliberate, "ckpt") == [("data.document_mask", None, True),
                                                         ("resilience.allow_data_change", None, True)]
    del now["train"]["total_tokens"]
    with pytest.raises(PretrainRunError, match=r"train.total_tokens \(100 -> '<absent>'\)"):
        resume_changes(SAVED, now, "ckpt")


@pytest.mark.parametrize("key", ["phase.general.mix.general", "phase.general.mix.reasoning"])
def test_a_mixture_edit_is_refused_whether_it_changes_or_adds_a_key(key):
    saved = changed(phase__general__mix__general=1.0)

    def now(**edits):
        cfg = OmegaConf.create(saved)
        for k, value in {key: 0.5, **edits}.items():
            OmegaConf.update(cfg, k, value)
        return OmegaConf.to_container(cfg)
    with pytest.raises(PretrainRunError, match=key.replace(".", r"\.") + r" \(.*mixture/source change"):
        resume_changes(saved, now(), "ckpt")
    deliberate = now(**{"resilience.allow_data_change": True})
    assert [k for k, _, _ in resume_changes(saved, deliberate, "ckpt")] == [key,
                                                                           "resilience.allow_data_change"]


def test_data_identity_differences_are_one_line_unless_allowed():
    from pretrain.resilience.identity import data_changes
    saved = {"tokenizer": "aaaa", "datasets": {"general": "g1", "reasoning": "r1"}}
    same = {"tokenizer": "aaaa", "datasets": {"general": "g1", "reasoning": "r1"}}
    assert data_changes(saved, same, "c/step_3", allow=False) == []
    other = {"tokenizer": "bbbb", "datasets": {"general": "g2", "reasoning": "r1"}}
    with pytest.raises(PretrainRunError) as err:
        data_changes(saved, other, "c/step_3", allow=False)
    line = str(err.value)
    assert "\n" not in line and "checkpoint c/step_3 was trained on other data" in line
    assert "tokenizer (aaaa -> bbbb), dataset general (g1 -> g2) differ" in line and "reasoning" not in line
    assert "resilience.allow_data_change=true" in line
    assert data_changes(saved, other, "c", allow=True) == [("tokenizer", "aaaa", "bbbb"),
                                                           ("dataset general", "g1", "g2")]
    with pytest.raises(PretrainRunError, match="written by an older pretrain that did not record"):
        data_changes(None, other, "c/step_3", allow=False)
    assert data_changes(None, other, "c", allow=True) == [("data", None, other)]


def test_a_long_list_of_refused_keys_stays_one_readable_line():
    saved = {"model": {f"k{i:02d}": i for i in range(12)}}
    with pytest.raises(PretrainRunError) as err:
        resume_changes(saved, {"model": {f"k{i:02d}": i + 100 for i in range(12)}}, "c")
    message = str(err.value)
    assert "model.k07 (7 -> 107)" in message and "model.k08" not in message
    assert "and 4 more" in message and "\n" not in message


def test_where_the_run_is_is_not_a_change():
    assert resume_changes(SAVED, changed(run_dir="/abs/runs/a", dry_run=True), "ckpt") == []
    assert resume_changes(None, SAVED, "ckpt") == []   # a checkpoint from before configs were saved


@pytest.mark.parametrize("edits, listed", [
    ({"model__hidden_size": 128}, ["model.hidden_size (64 -> 128)"]),
    ({"train__total_tokens": 200, "hardware__devices_per_node": 8, "train__log_every": 2},
     ["hardware.devices_per_node (1 -> 8)", "train.total_tokens (100 -> 200)"]),
])
def test_other_changes_are_refused_in_one_line_listing_each_key(edits, listed):
    with pytest.raises(PretrainRunError) as err:
        resume_changes(SAVED, changed(**edits), "checkpoint c/step_3")
    message = str(err.value)
    assert "\n" not in message and "checkpoint c/step_3" in message
    assert all(item in message for item in listed)
    assert "log_every" not in message.split(": a resume")[0]   # allowed keys are not blamed


def test_a_moved_cache_is_told_the_link_that_resumes_exactly():
    """Issue 27: a moved cache was told to "restore those keys", i.e. rebuild the cache at the old path."""
    saved = {**SAVED, "data": {"cache_dir": "/old/cache"}}
    with pytest.raises(PretrainRunError) as err:
        resume_changes(saved, {**SAVED, "data": {"cache_dir": "/new/cache"}}, "ckpt")
    message = str(err.value)
    assert "data.cache_dir ('/old/cache' -> '/new/cache')" in message and "\n" not in message
    assert "ln -s /new/cache /old/cache, then run with data.cache_dir=/old/cache" in message
    assert "config.yaml or" not in message       # no hint to edit a file the launcher does not read
