"""Phase LRs as users write them, fast: the end LR relative to the peak, the default curriculum's
figures, a phase run alone as a branch of the base run (its name, the checkpoint it starts from),
and keys the schema does not know. No mindspore: checkpoints here are fake but verifying dirs."""
import hashlib
import json
import math
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pretrain.config.phases import phases as phases_of
from pretrain.config import known_keys, validate
from pretrain.config.errors import PretrainConfigError, PretrainRunError
from pretrain.config.resolved import ResolvedRun
from pretrain.resilience.checkpoint import CheckpointManager, checkpoint_name
from pretrain.resilience.resume import check_branch, find_start, resume_changes, start_point
from pretrain.config.branch import run_suffix
from pretrain.train.schedule import curriculum, end_lr, levels, phase_lr
from pretrain.resilience.identity import final_tag
from tests.helpers.repo import REPO, options


# ------------------------------------------------------------------ the LR arithmetic
def lr(**kw):
    base = {"peak": 1e-3, "end": None, "end_ratio": 0.1, "warmup_fraction": 0.0, "schedule": "cosine",
            "wsd_decay_fraction": 0.2}
    return OmegaConf.create({**base, **kw})


def test_end_follows_the_phases_own_peak_unless_given():
    assert end_lr(lr(peak=3e-5, end_ratio=0.5), 3e-5) == pytest.approx(1.5e-5)
    assert end_lr(lr(end=2e-6), 3e-5) == 2e-6  # explicit: absolute
    p = phase_lr("reasoning", 10, lr(peak=3e-5, end_ratio=1 / 3), start=3e-4)
    assert p.peak == 3e-5 and p.final == pytest.approx(1e-5)
    # a continuing phase's own peak is the LR it starts from
    p = phase_lr("anneal", 10, lr(peak=None, end_ratio=0.1, schedule="linear"), start=1e-4)
    assert p.peak == 1e-4 and p.final == pytest.approx(1e-5)


def test_an_explicit_end_above_where_a_continuing_phase_starts_is_refused_when_the_start_is_known():
    with pytest.raises(PretrainConfigError, match=r"phase reasoning: lr.end=0.0005 is above .*\(0.0003\)"):
        phase_lr("reasoning", 10, lr(peak=None, end=5e-4), start=3e-4)


@pytest.mark.parametrize("model", options("model"))
def test_the_default_curriculum_keeps_its_figures_for_every_model(compose_many, model):
    cfg = compose_many([f"model={model}"])
    peak = cfg.train.lr_peak
    got = levels(phases_of(cfg))
    want = [(peak, 0.3 * peak), (0.3 * peak, 0.1 * peak), (0.1 * peak, 0.01 * peak)]
    assert [pytest.approx(level, rel=1e-12) for level in want] == got


def test_the_schedule_is_continuous_across_phase_boundaries(compose_many):
    cfg = compose_many(["train.lr_peak=1e-3"])
    general, reasoning, anneal = curriculum(phases_of(cfg), [40, 12, 6])
    assert reasoning.start == general.final == pytest.approx(3e-4)
    assert anneal.start == reasoning.final == pytest.approx(1e-4)
    assert anneal.final == pytest.approx(1e-5)
    # the first step of each continuing phase is one decay step below the previous phase's last LR
    assert reasoning.at(0) == pytest.approx(1e-4 + 2e-4 * 0.5 * (1 + math.cos(math.pi / 12)))
    assert anneal.at(0) == pytest.approx(1e-4 + (1e-5 - 1e-4) / 6)
    lrs = [p.at(i) for p in (general, reasoning, anneal) for i in range(p.steps)][general.warmup_steps:]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))  # after the warmup it never climbs
    # a later phase's end moves with the end of the phase before it (relative, not absolute)
    cfg = compose_many(["train.lr_peak=1e-3", "phase.general.lr.end_ratio=0.6"])
    assert levels(phases_of(cfg))[1] == pytest.approx((6e-4, 2e-4))


def test_a_cli_peak_for_one_phase_is_accepted_and_its_end_follows(compose_many):
    cfg = compose_many(["phase=reasoning", "phase.lr.peak=3e-5"])
    assert validate.problems(cfg) == []
    (reasoning,) = curriculum(phases_of(cfg), [10], start=3e-4)  # start: general's end
    assert reasoning.peak == 3e-5 and reasoning.final == pytest.approx(1e-5)
    cfg = compose_many(["phase=anneal", "phase.lr.peak=1e-4"])
    assert validate.problems(cfg) == [] and levels(phases_of(cfg))[0] == pytest.approx((1e-4, 1e-5))


@pytest.mark.parametrize("overrides,expected", [
    (["phase.reasoning.lr.end=5e-4"],
     "phase.reasoning.lr.end=0.0005 must be in [0, 0.0003, where phase.general ends]"),
    (["phase=reasoning", "phase.lr.peak=3e-5", "phase.lr.end=1e-4"],
     "phase.lr.end=0.0001 must be in [0, lr.peak(3e-05)]"),
    (["phase.anneal.lr.end_ratio=1.5"], "phase.anneal.lr.end_ratio=1.5 must be in [0, 1]"),
])
def test_an_end_that_would_climb_is_named(compose_many, overrides, expected):
    assert any(expected in p for p in validate.problems(compose_many(overrides))), validate.problems(
        compose_many(overrides))


# ------------------------------------------------------------------ branch names
@pytest.mark.parametrize("overrides,run_dir", [
    ([], "runs/tiny-single-cpu"),
    (["phase=general"], "runs/tiny-single-cpu"),  # the base run's first stage
    (["phase=general", "phase.lr.peak=3e-4"], "runs/tiny-single-cpu-general-lr0.0003"),
    (["phase=reasoning"], "runs/tiny-single-cpu-reasoning"),
    (["phase=reasoning", "phase.lr.peak=3e-5"], "runs/tiny-single-cpu-reasoning-lr3e-05"),
    (["phase=reasoning", "phase.lr.peak=1e-4"], "runs/tiny-single-cpu-reasoning-lr0.0001"),
    (["phase=anneal", "parallel=dp2", "hardware=cpu_2proc"], "runs/tiny-dp2-cpu_2proc-anneal"),
])
def test_a_later_phase_alone_writes_its_own_run_dir_and_starts_from_the_base_run(compose_many, overrides,
                                                                                   run_dir):
    cfg = compose_many(overrides)
    assert cfg.run_dir == run_dir
    base = "runs/" + "-".join([cfg.model.name, cfg.parallel.name, cfg.hardware.name])
    assert cfg.train.init_from == base


def test_run_suffix_of_a_users_own_phase():
    one = OmegaConf.create({"name": "my_finetune", "lr": {"peak": 1e-3}})
    assert run_suffix(one, 1e-3) == ""  # no predecessor, default peak: trains in the base run dir
    other = OmegaConf.create({"name": "my_finetune", "lr": {"peak": 2e-4}})
    assert run_suffix(other, 1e-3) == "-my_finetune-lr0.0002"


# ------------------------------------------------------------------ which checkpoint a branch starts from
def fake_checkpoint(directory: Path, step: int, saved: dict, tag=None) -> Path:
    """A checkpoint dir that verifies like a real one (CheckpointManager.save's layout), no mindspore."""
    final = directory / checkpoint_name(step, tag)
    final.mkdir(parents=True)
    (final / "weights.safetensors").write_bytes(b"w" * (step + 1))
    (final / "state.json").write_text(json.dumps(saved))
    files = {n: {"size": (final / n).stat().st_size,
                 "sha256": hashlib.sha256((final / n).read_bytes()).hexdigest()}
             for n in ("weights.safetensors", "state.json")}
    manifest = {"version": 1, "step": step, "tag": tag, "created": float(step), "config_hash": "",
                "files": files}
    (final / "manifest.json").write_text(json.dumps(manifest))
    return final


def state(phase, phase_step, *done):
    return {"phase": phase, "phase_step": phase_step, "phases_done": list(done)}


GENERAL_DONE = state("general", 34, "general")


def base_run(root: Path) -> Path:
    """What phase=all leaves (keep_checkpoint_max=3): each phase's final checkpoint, the newest plain ones."""
    ckpt = root / "checkpoints"
    fake_checkpoint(ckpt, 34, GENERAL_DONE, final_tag("general"))
    fake_checkpoint(ckpt, 44, state("reasoning", 10, "general", "reasoning"), final_tag("reasoning"))
    for step in (45, 48):
        fake_checkpoint(ckpt, step, state("anneal", step - 44, "general", "reasoning"))
    fake_checkpoint(ckpt, 49, state("anneal", 5, "general", "reasoning", "anneal"), final_tag("anneal"))
    return root


def tree(root: Path):
    return sorted((str(p.relative_to(root)), p.stat().st_mtime_ns) for p in root.rglob("*"))


def test_a_branch_starts_from_the_previous_phases_final_checkpoint_of_the_base_run(tmp_path):
    base = base_run(tmp_path / "runs" / "tiny-single-cpu")
    before = tree(base)
    own = CheckpointManager(tmp_path / "runs" / "tiny-single-cpu-reasoning-lr3e-05" / "checkpoints",
                            keep_latest=3)
    start = find_start(["reasoning"], "general", own, init_from=str(base))
    assert start.handoff and start.info.verified and start.info.path == base / "checkpoints" / (
        "step_00000034-phase-general-final")
    start = find_start(["anneal"], "reasoning", own, init_from=str(base / "checkpoints"))  # checkpoints/
    assert start.info.path.name == "step_00000044-phase-reasoning-final"
    assert tree(base) == before  # the base run is only read


def test_a_branch_resumes_its_own_checkpoints_not_the_base_runs(tmp_path):
    base = base_run(tmp_path / "base")
    own_dir = tmp_path / "branch" / "checkpoints"
    own = CheckpointManager(own_dir, keep_latest=3)
    # the branch's own copy of its start (runner.resume saves it): a restart before its first save
    fake_checkpoint(own_dir, 34, GENERAL_DONE, final_tag("general"))
    start = find_start(["reasoning"], "general", own, init_from=str(base))
    assert start.handoff and start.info.path.parent == own_dir
    fake_checkpoint(own_dir, 40, state("reasoning", 6, "general"))
    start = find_start(["reasoning"], "general", own, init_from=str(base))
    assert not start.handoff and start.info.path == own_dir / "step_00000040"


def test_phase_all_continues_a_run_of_phase_general_alone_and_back(compose_many, tmp_path):
    """Issue 27: README calls phase=general alone the base run's first stage, yet phase=all on its run
    dir was refused over every phase.* key with a "restore those keys" fix no command line could
    follow. The general phase's block is compared with its namesake; the later phases are new."""
    general = OmegaConf.to_container(compose_many(["phase=general"]), resolve=True)
    everything = compose_many([])
    ckpt = tmp_path / "checkpoints"
    fake_checkpoint(ckpt, 34, {**GENERAL_DONE, "config": general}, final_tag("general"))
    start, changes = start_point(ResolvedRun.of(everything), CheckpointManager(ckpt, keep_latest=3))
    assert not start.handoff and start.info.path.name == "step_00000034-phase-general-final"
    assert changes == []
    # the other way: a curriculum stopped in general, resumed as phase=general alone
    mid = OmegaConf.to_container(everything, resolve=True)
    assert resume_changes(mid, general, "ckpt") == []
    # a real change to the general phase is still refused, under the curriculum's key
    other = compose_many(["phase.general.token_fraction=0.6"])
    with pytest.raises(PretrainRunError, match=r"phase\.general\.token_fraction \(0\.7 -> 0\.6\)"):
        start_point(ResolvedRun.of(other), CheckpointManager(ckpt, keep_latest=3))


def test_a_named_checkpoint_is_the_start_and_a_corrupt_final_one_is_passed_over(tmp_path):
    base = base_run(tmp_path / "base")
    own = CheckpointManager(tmp_path / "branch" / "checkpoints", keep_latest=3)
    named = base / "checkpoints" / "step_00000048"
    start = find_start(["anneal"], "reasoning", own, init_from=str(named))
    assert start.handoff and start.info.path == named and start.info.step == 48
    (named / "weights.safetensors").write_bytes(b"flipped")
    with pytest.raises(PretrainRunError, match=r"train.init_from=.*step_00000048 does not verify"):
        find_start(["anneal"], "reasoning", own, init_from=str(named))
    # an older good final checkpoint of the phase wins over a newer corrupt one
    fake_checkpoint(base / "checkpoints", 20, state("general", 20, "general"), final_tag("general"))
    (base / "checkpoints" / "step_00000034-phase-general-final" / "state.json").write_text("{}")
    start = find_start(["reasoning"], "general", own, init_from=str(base))
    assert start.info.path.name == "step_00000020-phase-general-final"


def test_without_a_finished_previous_phase_the_error_names_the_run_to_train_first(tmp_path):
    own = CheckpointManager(tmp_path / "branch" / "checkpoints", keep_latest=3)
    with pytest.raises(PretrainRunError, match=r"base run .*nowhere .*no such run: train it first "
                       r"\(python -m pretrain model=tiny"):
        find_start(["reasoning"], "general", own, init_from=str(tmp_path / "nowhere"),
                   train_first="python -m pretrain model=tiny parallel=single hardware=cpu")
    mid = tmp_path / "mid" / "checkpoints"
    fake_checkpoint(mid, 12, state("general", 12))
    with pytest.raises(PretrainRunError, match=r"no verified phase-general-final checkpoint "
                       r"\(newest: step_00000012\)"):
        find_start(["reasoning"], "general", own, init_from=str(tmp_path / "mid"))


def test_check_branch_runs_before_any_data_is_prepared(compose_many, tmp_path):
    cfg = compose_many(["phase=reasoning", "phase.lr.peak=3e-5", f"hydra.run.dir={tmp_path}"])
    cfg.run_dir, cfg.train.init_from = str(tmp_path / "branch"), str(tmp_path / "base")
    with pytest.raises(PretrainRunError, match=r"^phase=reasoning is a branch of the base run .*"
                       r"python -m pretrain model=tiny parallel=single hardware=cpu"):
        check_branch(ResolvedRun.of(cfg))
    base = base_run(tmp_path / "base")
    check_branch(ResolvedRun.of(cfg))
    # a base run of another model is named before any data is prepared
    from pretrain.resilience.identity import architecture

    other = {**architecture(cfg), "hidden_size": 64}
    fake_checkpoint(base / "checkpoints", 50, {**GENERAL_DONE, "model": other}, final_tag("general"))
    with pytest.raises(PretrainRunError, match=r"step_00000050-phase-general-final, a model with "
                       r"model.hidden_size=64, but this run has model.hidden_size=256: give the branch"):
        check_branch(ResolvedRun.of(cfg))
    cfg = compose_many([])  # the curriculum never branches
    cfg.run_dir, cfg.train.init_from = str(tmp_path / "other"), str(tmp_path / "nowhere")
    check_branch(ResolvedRun.of(cfg))


# ------------------------------------------------------------------ keys the schema does not know
def test_a_key_added_with_plus_that_the_schema_lacks_is_named_with_the_one_meant(compose_many):
    assert known_keys.unknown(compose_many(["+train.lr=1e-3"])) == [
        "train.lr: no such key in the schema (pretrain/config/schema.py), so nothing would read it; "
        "did you mean train.lr_peak?"]
    (line,) = known_keys.unknown(compose_many(["+phase.lr.peak=3e-5"]))
    assert line.startswith("phase.lr.peak=3e-05: phase=all trains 3 phases") and (
        "phase.general.lr.peak, phase.reasoning.lr.peak or phase.anneal.lr.peak" in line)
    (line,) = known_keys.unknown(compose_many(["+model.hiden_size=3"]))
    assert "did you mean model.hidden_size?" in line
    with pytest.raises(PretrainConfigError, match="train.foo.bar: no such key"):
        validate.check(compose_many(["+train.foo.bar=1"]))
    # + still adds to the open mappings
    assert known_keys.unknown(compose_many(["+phase.anneal.mix.web=1.0"])) == []


def test_suggest_names_a_near_sibling_or_nothing():
    known = ["train.lr_peak", "train.seed", "phase.name", "phase.lr.peak", "phase.lr.end", "model.seq_length"]
    assert known_keys.suggest("train.lr", known) == "train.lr_peak"  # a sibling that extends it
    assert known_keys.suggest("phase.lr.peek", known) == "phase.lr.peak"
    assert known_keys.suggest("phase.foo", known) is None  # a shared prefix alone is no likeness
    assert known_keys.suggest("train.seq_length", known) == "model.seq_length"  # under another group


@pytest.mark.parametrize("group", ["model", "parallel", "phase", "hardware", "data"])
def test_every_option_and_sweep_composes_without_unknown_keys(compose_many, group):
    for option in options(group):
        assert known_keys.unknown(compose_many([f"{group}={option}"])) == [], option


@pytest.mark.parametrize("sweep", sorted(p.stem for p in (REPO / "sweeps").glob("*.yaml")))
def test_sweep_definitions_compose_without_unknown_keys(compose_many, sweep):
    assert known_keys.unknown(compose_many([], config_name=sweep)) == []


def test_sweep_rows_carry_each_jobs_final_validation_loss_best_first(tmp_path):
    import csv

    from pretrain.sweep.summary import write_row, write_summary

    for job, (peak, val) in enumerate([(1e-5, 7.58), (3e-5, 7.5712), (1e-4, 7.5531)]):
        write_row(tmp_path / str(job), {"job": job, "status": "ok", "reason": "",
                                        "overrides": f"phase=reasoning phase.lr.peak={peak}"})
        phases = [{"phase": "general", "val_loss_last": 9.9}, {"phase": "reasoning", "val_loss_last": val}]
        (tmp_path / str(job) / "summary.json").write_text(json.dumps({"phases": phases}))
    write_row(tmp_path / "3", {"job": 3, "status": "invalid", "reason": "bad",
                                        "overrides": "phase=reasoning phase.lr.peak=2"})
    write_summary(tmp_path)
    rows = list(csv.DictReader((tmp_path / "summary.csv").read_text().splitlines()))
    assert [(r["label"], r["val_loss"]) for r in rows] == [
        ("phase.lr.peak=1e-05", "7.58"), ("phase.lr.peak=3e-05", "7.5712"),
        ("phase.lr.peak=0.0001", "7.5531"), ("phase.lr.peak=2", "")]
    md = (tmp_path / "summary.md").read_text().splitlines()[2:]
    assert [line.split(" | ")[1] for line in md] == [
        "phase.lr.peak=0.0001", "phase.lr.peak=3e-05", "phase.lr.peak=1e-05", "phase.lr.peak=2"]
    assert "| 7.5531 |" in md[0]
