"""LR parity: the learning rate MindFormers' trainer steps by (the lr_schedule of each exported
run_dir/mindformers_<phase>.yaml, built by MindFormers' own build_lr) is our loop's schedule
(pretrain/train/schedule.py) at every phase boundary and at 20 points inside each phase, across the
curriculum, for every schedule kind."""

import numpy as np
import pytest

from pretrain.config.phases import phase_steps, phases as phases_of
from pretrain.config.resolved import ResolvedRun
from pretrain.engine import phases as engine_phases
from pretrain.model import mindformers_config as mfc
from pretrain.train.schedule import curriculum


def _points(steps: int) -> list:
    inside = np.linspace(0, steps - 1, 22).round().astype(int)[1:-1].tolist()  # 20 inside
    return sorted({0, 1, steps - 2, steps - 1, *inside} & set(range(steps)))


@pytest.mark.parametrize(
    "overrides",
    [
        [],  # cosine, warmup, continuing peaks
        ["phase.general.lr.schedule=wsd", "phase.anneal.lr.schedule=linear"],
        ["phase.general.lr.schedule=constant", "phase.general.lr.warmup_fraction=0.3"],
    ],
)
def test_every_phase_yaml_steps_the_lr_our_loop_steps(mindformers, compose_many, tmp_path, overrides):
    from mindformers.core.lr.build_lr import build_lr
    from mindformers.tools.register import MindFormerConfig
    from mindspore import Tensor
    import mindspore.common.dtype as mstype

    from pretrain.engine.lr import register

    register()
    cfg = compose_many([*overrides, f"run_dir={tmp_path}"])
    plist = phases_of(cfg)
    ours = curriculum(plist, [phase_steps(cfg, p) for p in plist])
    written = engine_phases.write_phases(ResolvedRun.of(cfg))
    assert [p.name for p in written] == [f"mindformers_{p.name}.yaml" for p in plist]
    first = 0
    for path, lr in zip(written, ours):
        config = MindFormerConfig(str(path))
        schedule = build_lr(config.lr_schedule)  # what MindFormers' trainer builds from the yaml
        assert type(schedule).__name__ == "PretrainPhaseLR"
        for i in _points(lr.steps):
            # MindSpore's optimizer evaluates the schedule at its global step before incrementing it:
            # the i-th update of the phase runs at global step first + i
            got = float(schedule(Tensor(first + i, mstype.int32)).asnumpy())
            assert got == pytest.approx(lr.at(i), rel=1e-5, abs=1e-10), (lr.name, i)
        first += lr.steps
    boundaries = [(a.final, b.at(0)) for a, b in zip(ours, ours[1:])]
    assert all(abs(b - a) <= abs(a) * 0.05 for a, b in boundaries)  # continuous: no jump back to a peak


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
