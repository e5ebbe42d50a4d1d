"""LR parity: the learning rate MindFormers' trainer steps by (the lr_schedule of each exported
run_dir/mindformers_<phase>.yaml, built by MindFormers' own build_lr) is our loop's schedule
(pretrain/train/schedule.py) at every phase boundary and at 20 points inside each phase, across the
curriculum, for every schedule kind."""

import numpy as np
import pytest

from pretrain.config.phases import phase_steps, phases as phases_of
from pretrain.config.resolved import ResolvedRun
from pretrain.engine import phases as engine_phases
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
