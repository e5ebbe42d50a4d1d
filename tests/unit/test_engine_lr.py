"""LR parity: the learning rate MindFormers' trainer steps by (the lr_schedule of each exported
run_dir/mindformers_<phase>.yaml, built by MindFormers' own build_lr) is our loop's schedule
(pretrain/train/schedule.py) at every phase boundary and at 20 points inside each phase, across the
curriculum, for every schedule kind."""
from pretrain.config.resolved import ResolvedRun
from pretrain.engine import phases as engine_phases
from pretrain.model import mindformers_config as mfc


def test_phases_continue_from_the_previous_phase_checkpoint(compose_many, tmp_path):
    cfg = compose_many(["model=llama3_70b", "parallel=dp8tp4pp2", "hardware=ascend910b_8x8",
                        f"run_dir={tmp_path}"])
    exported = engine_phases.export_phases(ResolvedRun.of(cfg))
    assert list(exported) == ["general", "reasoning", "anneal"]
    g, r, a = exported.values()
    assert g["load_checkpoint"] == "" and g["resume_training"] is False
    assert r["load_checkpoint"] == str(engine_phases.checkpoint_dir(tmp_path, "general"))
    assert a["load_checkpoint"] == str(engine_phases.checkpoint_dir(tmp_path, "reasoning"))
    assert r["resume_training"] is True and r["ignore_data_skip"] is True  # optimizer + step; new data
    assert g["auto_trans_ckpt"] is True  # per-rank shards, resharded
    assert r["lr_schedule"]["first_step"] == g["lr_schedule"]["steps"]
    assert a["lr_schedule"]["first_step"] == g["lr_schedule"]["steps"] + r["lr_schedule"]["steps"]
    (ckpt,) = [c for c in g["callbacks"] if c["type"] == "CheckpointMonitor"]
    assert ckpt["save_checkpoint_steps"] == cfg.train.save_every_steps
    assert ckpt["keep_checkpoint_max"] == cfg.train.keep_checkpoint_max
    assert g["output_dir"] == str(engine_phases.output_dir(tmp_path, "general"))
    assert g["train_dataset"]["data_loader"] == {
        "type": "PretrainShardLoader",
        "run_dir": str(tmp_path.resolve()),
        "phase": "general",
        "dataset_files": [],
    }
    # the document-mask inputs follow data.document_mask (70B at seq 8192 on Ascend: the compressed EOD mask)
    assert g["train_dataset"]["input_columns"] == mfc.input_columns(cfg) == [
        "input_ids", "labels", "loss_mask", "position_ids", "actual_seq_len"]
