"""Phase LRs as users write them, fast: the end LR relative to the peak, the default curriculum's
figures, a phase run alone as a branch of the base run (its name, the checkpoint it starts from),
and keys the schema does not know. No mindspore: checkpoints here are fake but verifying dirs."""

import pytest
from omegaconf import OmegaConf


# ------------------------------------------------------------------ the CLI, as a user types it
CLI_ERRORS = [
    (["+train.lr=1e-3"], "error: train.lr: no such key in the schema", "did you mean train.lr_peak?"),
    (["+phase.lr.peak=3e-5"], "error: phase.lr.peak=3e-05: phase=all trains 3 phases",
     "phase.general.lr.peak, phase.reasoning.lr.peak or phase.anneal.lr.peak"),
    (["phase.lr.peak=3e-5"], "error: phase.lr.peak=3e-5: phase=all trains 3 phases",
     "phase.general.lr.peak, phase.reasoning.lr.peak or phase.anneal.lr.peak"),
    (["train.lr=1e-3"], "error: Could not override 'train.lr': Key 'lr' not in 'TrainConfig'",
     "did you mean train.lr_peak?"),
    (["phase=reasoning", "phase.lr.peak=3e-5"], "error: phase=reasoning is a branch of the base run "
     "runs/tiny-single-cpu", "train it first (python -m pretrain model=tiny parallel=single hardware=cpu"),
]


@pytest.mark.parametrize("args,starts,names", CLI_ERRORS, ids=[" ".join(a) for a, _, _ in CLI_ERRORS])
def test_cli_refuses_in_one_line(cli, args, starts, names):
    proc = cli(*args)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(starts) and names in line, line


def test_the_readme_phase_command_checks_and_plans(cli, tmp_path):
    proc = cli("phase=reasoning", "phase.lr.peak=3e-5", "dry_run=true")
    assert proc.returncode == 0, proc.stderr
    frozen = OmegaConf.load(tmp_path / "runs" / "tiny-single-cpu-reasoning-lr3e-05" / "config.yaml")
    assert frozen.phase.lr.peak == 3e-5 and frozen.phase.lr.end is None
    assert frozen.train.init_from == "runs/tiny-single-cpu"
    assert not (tmp_path / "runs" / "tiny-single-cpu").exists()  # the base run is never written
