"""Every command README.md shows runs: the set-up commands above the first section and every command
of its Usage section (code blocks and `python ...` spans in the prose), parsed from the README so a
command added there is tested here without editing this file.

Commands run in tmp_path in their dry-run form (`dry_run=true` appended to `python -m pretrain`, which
checks, plans and freezes exactly as the real run does, then prints what it would launch). A command
that has no dry-run form is skipped with the reason, after checking that what it names exists.
"""
import importlib.util
import re
import shlex

import pytest

from tests.conftest import REPO

README = REPO / "README.md"
PYTHON_M = ["python", "-m"]
# Hydra's own flags print and exit; they start nothing, so they run as written.
INFO_FLAGS = {"--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "--shell-completion"}
DRY_ALREADY = {"dry_run=true", "launcher=print"}
# Known product bugs, keyed by the README command: the lead drops a mark when its fix is merged.
KNOWN_FAILURES = {
    "python -m pretrain phase=reasoning phase.lr.peak=3e-5":
        "issue 9 item 5 (branch i9-lr): a phase's end LR is absolute (1e-4 > peak 3e-5), exit 2",
}


def _sections(text):
    """{title: body}; the text above the first '## ' heading is under ''."""
    parts = re.split(r"^## +(.+)$", text, flags=re.M)
    return {"": parts[0], **{parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}}


def _commands_in(body):
    """Lines of indented code blocks and inline `python ...` spans, each split at `&&`."""
    lines = [line[4:] for line in body.splitlines() if line.startswith("    ") and line.strip()]
    lines += re.findall(r"`(python [^`]+)`", body)
    for line in lines:
        for part in line.split("&&"):
            words = shlex.split(part, comments=True)   # README quoting ('parallel=glob(*)'), `# note`
            if words[:1] == ["python"]:
                yield " ".join(shlex.quote(w) for w in words)


def readme_commands():
    sections = _sections(README.read_text())
    found = [*_commands_in(sections[""]), *_commands_in(sections["Usage"])]
    return list(dict.fromkeys(found))   # README repeats `python -m pretrain`; run it once


def how_to_run(command):
    """(argv after `python`, None) to run it, or (None, skip reason)."""
    words = shlex.split(command)
    if words[:2] != PYTHON_M or len(words) < 3:
        return None, f"not a `python -m` command: teach tests/test_readme.py how to run {command!r}"
    module, args = words[2], words[3:]
    placeholders = [a for a in args if re.fullmatch(r"[A-Z][A-Z0-9_]*", a)]
    if module == "pip":
        return None, "installs into this interpreter; .ci/run and test_packaging.py cover installing"
    if module == "pytest":
        return None, "the test suite itself (.ci/run runs both README test commands)"
    if module.startswith("pretrain.bench."):
        return None, "a benchmark: it times real training/data work (minutes) and has no dry-run form"
    if placeholders:
        return None, f"a template: {' '.join(placeholders)} stands for a path the launcher passes"
    if module == "pretrain" and not (INFO_FLAGS & set(args) or DRY_ALREADY & set(args)):
        args = [*args, "dry_run=true"]   # the real run trains (minutes); its dry run checks + plans it
    return ["-m", module, *args], None


def _case(command):
    known = KNOWN_FAILURES.get(command)
    marks = [pytest.mark.xfail(strict=False, reason=known)] if known else []
    return pytest.param(command, marks=marks, id=command[len("python -m "):] or command)


def test_the_readme_parse_finds_its_set_up_and_usage_commands():
    """Guards the parser: if it found nothing, every README command would 'pass' unrun."""
    found = readme_commands()
    assert "python -m pretrain" in found                                            # set-up and Usage
    assert 'python -m pip install -e ".[test]"' in [c.replace("'", '"') for c in found]
    assert "python -m pytest -m slow" in found
    sweep = "python -m pretrain -m model=llama3_70b hardware=ascend910b_8x8 dry_run=true 'parallel=glob(*)'"
    assert sweep in found, "a quoted argument survives the parse"
    assert any("--config-name" in c for c in found), "the prose's inline commands are found too"
    assert len(found) >= 10, found


@pytest.mark.parametrize("command", [_case(c) for c in readme_commands()])
def test_readme_command_runs(command, tmp_path, run_python):
    argv, skip = how_to_run(command)
    if skip:
        module = shlex.split(command)[2]
        if module.startswith("pretrain"):   # a skipped command still names something that exists
            assert importlib.util.find_spec(module) is not None, f"README names a missing module: {command}"
        pytest.skip(skip)
    proc = run_python(*argv)
    ran = f"python {shlex.join(argv)}"
    assert proc.returncode == 0, (f"README command failed (exit {proc.returncode}), run as: {ran}\n"
                                  f"stderr:\n{proc.stderr[-3000:]}\nstdout:\n{proc.stdout[-1500:]}")
