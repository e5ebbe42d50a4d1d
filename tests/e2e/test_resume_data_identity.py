"""Issue 27: nothing resumes silently on other data. Every checkpoint records the tokenizer's hash and
each prepared dataset's shard checksums (pretrain/resilience/identity.py); a resume, a phase
hand-off or a branch whose data differs is refused in one line naming what changed, unless
resilience.allow_data_change=true says it is deliberate (then logged as a data_change event).

End to end on a real (shrunken) run over a corpus of files: documents added after a stop (the
tokenizer is retrained), a checkpoint of an older pretrain (no data identity), a branch from a base
run with another tokenizer, and the file at data.tokenizer.path replaced."""
import json
import shutil
from pathlib import Path

import pytest

from pretrain.resilience.checkpoint import MANIFEST, STATE, _describe
from pretrain.resilience.events import read_events
from tests.helpers import cli
from tests.helpers.files_run import ARGS, MODEL, SOURCES, corpus

pytestmark = pytest.mark.slow

CACHE = []    # the module's one data cache (set by `base`)


def add_documents(root: Path) -> None:
    """Documents of other modules into data/general: enough new text to change the tokenizer."""
    import email
    import pathlib
    import tarfile
    import zipfile
    docs = [d for mod in (email, pathlib, tarfile, zipfile) for name in dir(mod)
            for d in [getattr(getattr(mod, name), "__doc__", None)] if isinstance(d, str) and len(d) > 200]
    for i, text in enumerate(dict.fromkeys(docs)):
        (root / "data" / "general" / f"new{i}.txt").write_text(text)


def pretrain(cwd: Path, *args: str, cache: Path = None):
    """`python -m pretrain ARGS` in cwd (its data/ the corpus), on one shared cache (data.cache_dir is
    part of the run's config: another one would be refused as a config change)."""
    return cli.run(*ARGS, *args, cwd=cwd, cache=cache or CACHE[0], timeout=600)


def ok(proc):
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def refused(proc) -> str:
    assert proc.returncode == 2, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def checkpoints(run_dir: Path):
    return sorted(p.name for p in (run_dir / "checkpoints").glob("step_*"))


def mid_phase_copy(run_dir: Path, to: Path) -> Path:
    """The run as a stop after step 3 left it: its final checkpoint gone, so a rerun resumes at step 3."""
    shutil.copytree(run_dir, to)
    for final in (to / "checkpoints").glob("*-final"):
        shutil.rmtree(final)
    return to


def strip_data_identity(checkpoint: Path) -> None:
    """As an older pretrain wrote it: no "data" in its state (the manifest re-described to verify)."""
    state = json.loads((checkpoint / STATE).read_text())
    state.pop("data")
    (checkpoint / STATE).write_text(json.dumps(state))
    manifest = json.loads((checkpoint / MANIFEST).read_text())
    manifest["files"][STATE] = _describe(checkpoint / STATE)
    (checkpoint / MANIFEST).write_text(json.dumps(manifest))


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A finished phase=general run (checkpoints at steps 3 and 6-final) on a corpus of files."""
    cwd = tmp_path_factory.mktemp("identity")
    CACHE[:] = [cwd / "cache"]
    corpus(cwd)
    out = ok(pretrain(cwd, f"run_dir={cwd / 'base'}")).stdout
    (cwd / "tokenizer").write_text(out.split("\ntokenizer: ", 1)[1].split(" (vocab", 1)[0])
    state = json.loads((cwd / "base" / "checkpoints" / "step_00000003" / STATE).read_text())
    assert set(state["data"]) == {"tokenizer", "datasets"} and set(state["data"]["datasets"]) == set(SOURCES)
    return cwd


def test_a_checkpoint_without_data_identity_is_refused_unless_overridden(base):
    run = mid_phase_copy(base / "base", base / "old")
    strip_data_identity(run / "checkpoints" / "step_00000003")
    before = checkpoints(run)
    line = refused(pretrain(base, f"run_dir={run}"))
    assert "written by an older pretrain that did not record the tokenizer and data" in line
    assert "resilience.allow_data_change=true" in line and checkpoints(run) == before
    out = ok(pretrain(base, f"run_dir={run}", "resilience.allow_data_change=true")).stdout
    assert "data changed since the checkpoint" in out
    assert [e["what"] for e in read_events(run / "events.jsonl") if e["kind"] == "data_change"] == ["data"]


def test_documents_added_after_a_stop_are_refused_then_accepted_on_purpose(base, tmp_path):
    shutil.copytree(base / "data", tmp_path / "data")
    run = mid_phase_copy(base / "base", tmp_path / "run")
    add_documents(tmp_path)
    before = checkpoints(run)
    line = refused(pretrain(tmp_path, f"run_dir={run}"))      # the tokenizer is retrained
    assert f"checkpoint {run / 'checkpoints' / 'step_00000003'} was trained on other data" in line
    assert "tokenizer (" in line and "dataset general (" in line   # and every source tokenized with it
    assert checkpoints(run) == before
    proc = ok(pretrain(tmp_path, f"run_dir={run}", "resilience.allow_data_change=true"))
    assert "resumes phase general at step 3" in proc.stdout
    changes = [e["what"] for e in read_events(run / "events.jsonl") if e["kind"] == "data_change"]
    assert changes == ["tokenizer", "dataset anneal", "dataset general", "dataset reasoning"]
    # the checkpoints written since carry the new data: the same command resumes without the override
    ok(pretrain(tmp_path, f"run_dir={run}"))


def test_a_branch_from_a_base_run_with_another_tokenizer_is_refused(base, tmp_path):
    shutil.copytree(base / "data", tmp_path / "data")
    add_documents(tmp_path)   # another corpus here: another tokenizer
    line = refused(pretrain(tmp_path, "phase=reasoning", f"train.init_from={base / 'base'}",
                            f"run_dir={tmp_path / 'branch'}"))
    assert "phase-general-final was trained on other data" in line and "tokenizer (" in line
    assert checkpoints(tmp_path / "branch") == []


def test_the_file_at_tokenizer_path_replaced_is_refused(base, tmp_path):
    shutil.copytree(base / "data", tmp_path / "data")
    trained = (base / "tokenizer").read_text()   # the base run's
    given = tmp_path / "spm.model"
    shutil.copy(trained, given)
    args = [f"data.tokenizer.path={given}", "data.tokenizer.train=false", f"run_dir={tmp_path / 'run'}"]
    ok(pretrain(tmp_path, *args))
    run = tmp_path / "run"
    for final in (run / "checkpoints").glob("*-final"):
        shutil.rmtree(final)
    other = tmp_path / "other"
    shutil.copytree(base / "data", other / "data")
    add_documents(other)   # the same recipe trained on another corpus: same vocabulary size, other pieces
    cli.run("data=files", *MODEL, cwd=other, module="pretrain.data", timeout=600, check=True)
    shutil.copy(next((other / "cache" / "tokenizers").glob("*/tokenizer.model")), given)
    line = refused(pretrain(tmp_path, *args))
    assert "was trained on other data" in line and "tokenizer (" in line
