"""`python -m pretrain` as a user runs it: subprocesses in tmp_path."""
import csv
import json
import re
import subprocess
import sys
import textwrap

import pytest

from tests.helpers.cli import run as cli_run
from tests.helpers.repo import REPO

BIG = ["model=llama3_70b", "parallel=dp8tp4pp2", "hardware=ascend910b_8x8"]

BAD_CONFIGS = [
    # (overrides, text the one-line error must contain)
    (["model.hiden_size=3"], "Key 'hiden_size' not in 'ModelConfig'"),
    (["model=llama4"], "Could not find 'model/llama4' (available: llama3_70b"),
    (["model.hidden_size=abc"], "Value 'abc' of type 'str' could not be converted to Integer"),
    (["parallel.dp=4"], "dp(4) * tp(1) * pp(1) * cp(1) = 4 != devices(1) of hardware=cpu"),
    ([*BIG[:2], "hardware=ascend910b_4x8"], "= 64 != devices(32) of hardware=ascend910b_4x8"),
    ([*BIG, "parallel.tp=16", "parallel.dp=2"], "model.num_kv_heads(8) % parallel.tp(16)"),
    ([*BIG, "parallel.pp=3"], "model.num_layers(80) % (pp(3) * vpp(1) = 3)"),
    ([*BIG, "model.vocab_size=128257"], "model.vocab_size(128257) % parallel.tp(4)"),
    (["model=qwen3_30b_a3b", "parallel=dp8ep8", "hardware=ascend910b_1x8", "model.num_experts=100"],
     "model.num_experts(100) % parallel.ep(8)"),
    ([*BIG, "train.global_batch_size=1001"], "train.global_batch_size(1001) % (parallel.micro_batch_size(1) * dp(8) = 8)"),
    (["model.seq_length=512"], "model.seq_length(512) > model.max_position_embeddings(256)"),
    (["phase.general.token_fraction=0.9"], "phase.*.token_fraction sums to 1.2 > 1"),
    (["phase=reasoning", "phase.lr.peak=1e-4", "phase.lr.end=1e-3"], "phase.lr.end=0.001 must be in [0, lr.peak(0.0001)]"),
    (["phase=general", "phase.lr.schedule=step"], "phase.lr.schedule='step' must be one of cosine"),
    (["+phase.anneal.mix.web=1.0"], "phase.anneal.mix.web: no such source in data=sample"),
    (["data.tokenizer.path=/nope/tok.model"], "data.tokenizer.path: no such file '/nope/tok.model'"),
    (["data.sources.general.builtin=null", "data.sources.general.paths=[/nope/corpus]"],
     "data.sources.general.paths: no such file or directory '/nope/corpus'"),
    (["parallel.dp=1", "parallel.tp=2", "hardware=cpu_2proc", "parallel.micro_batch_size=8", "model.num_kv_heads=4"],
     "tp(2) > 1 on hardware.device=cpu: MindSpore 2.9.0 refuses semi_auto_parallel on CPU"),
    (["model=tiny", "parallel=dp8ep8", "hardware=ascend910b_1x8", "dry_run=true"], "parallel.ep=8 but model=tiny is dense"),
    (["train.keep_checkpoint_max=0"], "train.keep_checkpoint_max=0 must be in [1, 1000000]"),
    (["+foo"], "Error parsing override '+foo'"),
    (["launcher=slurmz"], "launcher='slurmz' must be one of"),
]


@pytest.mark.parametrize("overrides,expected", BAD_CONFIGS, ids=[" ".join(o)[:60] for o, _ in BAD_CONFIGS])
def test_bad_config_is_one_line_and_exit_2(cli, overrides, expected):
    proc = cli(*overrides)
    assert proc.returncode == 2, proc.stderr
    assert expected in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert all(line.startswith("error: ") for line in proc.stderr.strip().splitlines()), proc.stderr


def test_full_error_env_shows_the_traceback(cli):
    proc = cli("parallel.dp=4", env={"HYDRA_FULL_ERROR": "1"})
    assert proc.returncode != 0 and "Traceback" in proc.stderr and "PretrainConfigError" in proc.stderr


def test_dry_run_plans_without_importing_mindspore(tmp_path):
    code = textwrap.dedent("""
        import sys, time
        t = time.time()
        sys.argv = ["pretrain", "model=llama3_70b", "parallel=dp8tp4pp2", "hardware=ascend910b_8x8", "dry_run=true"]
        from pretrain.__main__ import main
        main()
        print("SECONDS", time.time() - t)
        print("MINDSPORE_IMPORTED", "mindspore" in sys.modules or "mindformers" in sys.modules)
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "MINDSPORE_IMPORTED False" in proc.stdout
    assert "70.55B params" in proc.stdout and "DOES NOT FIT" in proc.stdout or "FITS" in proc.stdout
    run_dir = tmp_path / "runs" / "llama3_70b-dp8tp4pp2-ascend910b_8x8"
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["params_total"] == 70_553_706_496
    frozen = (run_dir / "config.yaml").read_text()
    assert "${" not in frozen and "grad_accum: 128" in frozen   # resolved: ranks never run Hydra
    print(proc.stdout.split("SECONDS")[1].split()[0], "s for compose + check + plan + freeze")


@pytest.mark.slow   # 2.5-4 s: the default suite keeps under 5 minutes
def test_hydra_conventions_keep_working(cli, tmp_path):
    helped = cli("--help", check=True).stdout
    for group in ("model:", "parallel:", "phase:", "hardware:", "data:", "llama3_70b", "dp8tp4pp2"):
        assert group in helped
    job = cli("--cfg", "job", "model=qwen3_8b", "+train.note=hello", check=True).stdout
    assert "name: qwen3_8b" in job and "note: hello" in job
    assert "Defaults List" in cli("--info", "defaults", check=True).stdout


@pytest.mark.slow   # four CLI processes
def test_user_config_dir_adds_options_without_touching_the_package(cli, tmp_path):
    mine = tmp_path / "myconf" / "model"
    mine.mkdir(parents=True)
    (mine / "llama3_70b_deep.yaml").write_text("defaults:\n  - llama3_70b\n  - _self_\nname: llama3_70b_deep\nnum_layers: 96\n")
    proc = cli("--config-dir", str(tmp_path / "myconf"), "model=llama3_70b_deep", "parallel=dp8tp4pp2",
               "hardware=ascend910b_8x8", "dry_run=true", check=True)
    assert "llama3_70b_deep" in proc.stdout and "dp8tp4pp2" in proc.stdout
    searched = cli(f"hydra.searchpath=[file://{tmp_path / 'myconf'}]", "model=llama3_70b_deep", "--cfg", "job", check=True)
    assert "num_layers: 96" in searched.stdout


@pytest.mark.slow   # reads README's sweep (test_readme.py SLOW_COMMANDS): the slow run
def test_layout_sweep_writes_every_row_and_exits_0(run_once):
    # README's sweep, run once for this test and test_readme.py
    proc, cwd = run_once("-m", "pretrain", "-m", "model=llama3_70b", "hardware=ascend910b_8x8",
                         "dry_run=true", "parallel=glob(*)", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (sweep,) = (p.parent for p in cwd.glob("multirun/*/summary.csv"))
    rows = list(csv.DictReader(open(sweep / "summary.csv")))
    layouts = sorted(p.stem for p in (REPO / "conf" / "parallel").glob("*.yaml"))
    assert len(rows) == len(layouts) >= 12
    by_layout = {r["label"].split("=")[1]: r for r in rows}
    # model parallel fits and goes to MindFormers' trainer (engine column): "ok"
    assert by_layout["dp8tp4pp2"]["status"] == "does not fit" and by_layout["dp4tp8pp2"]["status"] == "ok"
    assert by_layout["dp4tp8pp2"]["engine"] == "mindformers"
    # the console: one verdict line per job, the plans and node commands in each job's job.log
    verdicts = [ln for ln in proc.stdout.splitlines() if re.match(r"  #\d+ ", ln)]
    assert len(verdicts) == len(rows) and "node 0: msrun" not in proc.stdout
    assert any(ln.startswith("  #") and "does not fit by 47.8 GB: 111.8 of 64 GB" in ln for ln in verdicts)
    assert "node 0: msrun" in (sweep / str(by_layout["dp4tp8pp2"]["job"]) / "job.log").read_text()
    assert by_layout["single"]["status"] == "invalid" and "!= devices(64)" in by_layout["single"]["reason"]
    assert by_layout["dp8ep8"]["status"] == "invalid" and "dense" in by_layout["dp8ep8"]["reason"]
    assert float(by_layout["dp4tp8pp2"]["tokens_per_s"]) > 0
    assert (sweep / "summary.md").read_text().count("\n") == len(rows) + 2
    assert (sweep / "summary.png").stat().st_size > 10_000


@pytest.mark.slow   # reads README's sweep (test_readme.py SLOW_COMMANDS): the slow run
def test_sweep_definition_from_sweeps_dir(run_once):
    # README's sweep, run once for this test and test_readme.py
    proc, cwd = run_once("-m", "pretrain", "--config-name", "pangu_ultra_135b_1024", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (sweep,) = (p.parent for p in cwd.glob("multirun/*/summary.csv"))
    rows = list(csv.DictReader(open(sweep / "summary.csv")))
    assert len(rows) == 24
    assert {r["status"] for r in rows if "vpp=2" in r["label"]} == {"invalid"}
    # model parallel goes to MindFormers' trainer: every planned row says so; Pangu's sandwich norm
    # trains there (pretrain/model/sandwich.py), so micro-batch-1 rows are ok; what keeps a fitting
    # micro-batch-2 row "plan only" is the document mask's per-row ends (micro_batch_size=2)
    assert {r["engine"] for r in rows if r["engine"]} == {"mindformers"}, rows
    assert {r["status"] for r in rows if "micro_batch_size=1" in r["label"] and "vpp=1" in r["label"]} == {"ok"}
    plan_only = [r for r in rows if r["status"] == "plan only"]
    assert plan_only and all("micro_batch_size=2" in r["reason"] for r in plan_only)
    assert not any("sandwich_norm" in r["reason"] for r in rows)


@pytest.mark.slow   # 3-5 s each; with the slow suite to keep the default one within 5 minutes (it took 396 s in CI)
def test_data_app_has_its_own_help(cli, tmp_path):
    trainer = cli("--help", check=True).stdout
    data = cli_run("--help", cwd=tmp_path, module="pretrain.data", timeout=120, check=True).stdout
    assert trainer.startswith("pretrain: compose a model") and data.startswith("pretrain.data: prepare the")
    assert "data.sources.general.paths=" in data and "model: llama3_70b" in data   # same groups
    assert not list(tmp_path.glob("*.log")) and not (tmp_path / "outputs").exists()


def test_data_app_takes_a_users_config_dir_before_the_overrides(tmp_path):
    """`python -m pretrain.data --config-dir DIR data=mine`: the data app's own hydra.* overrides go
    after Hydra's flags (argparse takes the overrides as one run of words), before the user's."""
    (tmp_path / "mine" / "data").mkdir(parents=True)
    (tmp_path / "mine" / "data" / "mine.yaml").write_text("defaults:\n  - sample\n  - _self_\nval_fraction: 0.0123\n")
    proc = cli_run("--config-dir", str(tmp_path / "mine"), "data=mine", "--cfg", "job", cwd=tmp_path,
                   module="pretrain.data", timeout=120)
    assert proc.returncode == 0 and "val_fraction: 0.0123" in proc.stdout, proc.stderr


DATA_BAD = [(["data.workerz=2"], "Key 'workerz' not in 'DataConfig'; did you mean data.workers?"),
            (["model=llama4"], "Could not find 'model/llama4' (available: llama3_70b"),
            (["data.workers=abc"], "Value 'abc' of type 'str' could not be converted to Integer"),
            (["+foo"], "Error parsing override '+foo'"),
            (["data.sources.general.paths=[/nope/\udcff]"], "is not valid UTF-8 (byte 0xff)")]


@pytest.mark.parametrize("hydra_flag", [[], ["hydra.verbose=false"]], ids=["compose-once", "hydra.main"])
@pytest.mark.parametrize("overrides,expected", DATA_BAD, ids=[o[0][:30] for o, _ in DATA_BAD])
def test_data_app_bad_overrides_are_one_line_on_both_paths(tmp_path, overrides, expected, hydra_flag):
    """Plain overrides are composed once by the compose API, anything naming Hydra goes through
    hydra.main: the same one-line error either way, and nothing written."""
    proc = cli_run(*overrides, *hydra_flag, cwd=tmp_path, module="pretrain.data", timeout=120,
                   errors="surrogateescape")
    assert proc.returncode == 2 and expected in proc.stderr, proc.stderr
    assert proc.stderr.startswith("error: ") and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow   # four CLI processes
def test_options_without_their_own_name_get_their_own_run_dirs(cli, tmp_path):
    """A user's model files that extend llama3_70b without `name:` must not share (and overwrite)
    runs/llama3_70b-...: run names come from the options chosen on the command line."""
    (tmp_path / "myconf" / "model").mkdir(parents=True)
    for name, layers in (("mine", 40), ("other", 20)):
        (tmp_path / "myconf" / "model" / f"{name}.yaml").write_text(
            f"defaults:\n  - llama3_70b\n  - _self_\nnum_layers: {layers}\n")
        cli("--config-dir", str(tmp_path / "myconf"), f"model={name}", "parallel=dp4tp8pp2",
            "hardware=ascend910b_8x8", "dry_run=true", check=True)
    runs = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert runs == ["mine-dp4tp8pp2-ascend910b_8x8", "other-dp4tp8pp2-ascend910b_8x8"]
    frozen = [(tmp_path / "runs" / r / "config.yaml").read_text() for r in runs]
    assert "num_layers: 40" in frozen[0] and "num_layers: 20" in frozen[1]


def test_missing_data_files_are_noted_by_a_dry_run_and_refused_by_a_launch(cli, tmp_path):
    """Data on the cluster's storage need not be on the host that plans the run."""
    args = ["data=files", "data.sources.general.paths=[corpus/web]"]
    dry = cli(*args, "dry_run=true", "run_dir=dry")
    assert dry.returncode == 0, dry.stderr
    assert "note: data.sources.general.paths: no such file or directory 'corpus/web'" in dry.stdout
    launch = cli(*args, "run_dir=run")
    assert launch.returncode == 2 and "data.sources.general.paths: no such file or directory" in launch.stderr
    assert not (tmp_path / "run" / "config.yaml").exists()
