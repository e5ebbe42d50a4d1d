"""Every command README.md and the docs/ pages show runs (code blocks and `python ...` spans in the
prose), and the examples `--help` prints. They are parsed from README.md, docs/*.md and
conf/hydra/help/pretrain.yaml, so a command added there is tested here without editing this file.
Commands go in indented code blocks; a ``` fence is for text that is not a shell line (docs/code.md's
tree), which is not run.

Each runs in a directory of its own in its dry-run form (`dry_run=true` appended to `python -m
pretrain`: it checks, plans and freezes exactly as the real run does, then prints what it would
launch). A command that has no dry-run form is skipped with the reason, after checking that what it
names exists. The real runs are the slow suite's (test_train_e2e.py, test_launch_msrun.py).
"""
import importlib.util
import re
import shlex
import subprocess

import pytest
import yaml

from tests.helpers.repo import REPO
from tests.helpers.shown_commands import README, code_lines, commands, help_lines, shown_lines

# Hydra's own flags print and exit; they start nothing, so they run as written.
INFO_FLAGS = {"--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "--shell-completion"}
DRY_ALREADY = {"dry_run=true", "launcher=print"}
# Commands that read a trained run (the default job's, minutes of training): the test named runs each on one.
READS_A_RUN = {"pretrain.status": "test_status.py", "pretrain.export": "test_export.py",
               "pretrain.export.check": "test_export.py"}
# `python SCRIPT` lines of other projects that the docs show beside ours, run in those projects' checkouts.
OTHER_PROJECTS = {"run.py": "OpenCompass's entry point, run in an OpenCompass checkout"}


def _dry_sweep(args):
    """`--config-name NAME` of a sweep definition that is a dry run itself (sweeps/NAME.yaml)."""
    name = args[args.index("--config-name") + 1] if "--config-name" in args[:-1] else None
    path = REPO / "sweeps" / f"{name}.yaml"
    return name is not None and path.is_file() and yaml.safe_load(path.read_text()).get("dry_run") is True


def how_to_run(command):
    """(argv after `python`, None) to run it, or (None, why it is skipped)."""
    words = shlex.split(command)
    if words[1] in OTHER_PROJECTS:
        return None, OTHER_PROJECTS[words[1]]
    assert words[:2] == ["python", "-m"] and len(words) > 2, \
        f"not a `python -m MODULE` command: teach tests/test_readme.py how to run {command!r}"
    module, args = words[2], words[3:]
    placeholders = [a for a in args if re.fullmatch(r"[A-Z][A-Z0-9_]*", a)]
    if module == "pip":
        return None, "installs into this interpreter; .ci/run and test_packaging.py cover installing"
    if module == "pytest":
        return None, "the test suite itself (.ci/run runs both README test commands)"
    if module.startswith("pretrain.bench."):
        return None, "a benchmark: it times real training/data work (minutes) and has no dry-run form"
    if placeholders:
        return None, f"a template: {' '.join(placeholders)} stands for a path given when it runs"
    if module in READS_A_RUN:
        return None, f"reads a trained run; {READS_A_RUN[module]} runs it on one"
    if module == "pretrain.data" and "data=files" in args:
        return None, "prepares your corpus; test_readme_own_data.py runs the data step on one"
    if module == "pretrain" and not (INFO_FLAGS & set(args) or DRY_ALREADY & set(args) or _dry_sweep(args)):
        args = [*args, "dry_run=true"]   # the real run trains (minutes); its dry run checks + plans it
    return ("-m", module, *args), None


# README's commands that take 10-20 s each (the data step over the sample corpus, the sweeps): run by
# CI's slow run, with the test_cli.py tests that read the same runs (run_once), to keep the default
# suite within its 5 minutes.
SLOW_COMMANDS = ("python -m pretrain.data", "python -m pretrain --config-name", "python -m pretrain -m ")


def _case(command, readme_and_help):
    """A command only docs/ pages show (not in `readme_and_help`) is the slow run's (~2 s each, ~20 of
    them), to keep the default suite within its 5 minutes; README's and --help's run in the default one."""
    docs_only = command not in readme_and_help
    marks = [pytest.mark.slow] if command.startswith(SLOW_COMMANDS) or docs_only else []
    return pytest.param(command, id=command[len("python -m "):] or command, marks=marks)


@pytest.mark.parametrize("line", shown_lines())
def test_a_shell_accepts_the_line_as_shown(line):
    """What a user pastes: unquoted parentheses or a stray quote are a shell syntax error."""
    proc = subprocess.run(["bash", "-n", "-c", line], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"bash cannot parse {line!r}: {proc.stderr.strip()}"


_README_AND_HELP = set(commands([*code_lines(README.read_text()), *help_lines()]))


@pytest.mark.parametrize("command", [_case(c, _README_AND_HELP) for c in commands()])
def test_the_command_runs(command, run_once):
    argv, skip = how_to_run(command)
    if skip:
        module = shlex.split(command)[2]
        if module.startswith("pretrain"):   # a skipped command still names something that exists
            assert importlib.util.find_spec(module) is not None, f"README names a missing module: {command}"
        pytest.skip(skip)
    proc, _ = run_once(*argv)
    ran = f"python {shlex.join(argv)}"
    assert proc.returncode == 0, (f"README command failed (exit {proc.returncode}), run as: {ran}\n"
                                  f"stderr:\n{proc.stderr[-3000:]}\nstdout:\n{proc.stdout[-1500:]}")
