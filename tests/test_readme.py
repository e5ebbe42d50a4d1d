"""Every command README.md shows runs: the set-up commands above the first section and every command
of its Usage section (code blocks and `python ...` spans in the prose), and the examples `--help`
prints. They are parsed from README.md and conf/hydra/help/pretrain.yaml, so a command added there is tested here
without editing this file.

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

from tests.conftest import REPO, options

README = REPO / "README.md"
# Hydra's own flags print and exit; they start nothing, so they run as written.
INFO_FLAGS = {"--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "--shell-completion"}
DRY_ALREADY = {"dry_run=true", "launcher=print"}
# Known product bugs, keyed by the command as normalised below: drop the entry when the fix is merged.
def _sections(text):
    """{title: body}; the text above the first '## ' heading is under ''."""
    parts = re.split(r"^## +(.+)$", text, flags=re.MULTILINE)
    return {"": parts[0], **{parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}}


def _lines_in(body):
    """Lines of indented code blocks and inline `python ...` spans: what a user would paste."""
    blocks = [line.strip() for line in body.splitlines() if line.startswith("    ") and line.strip()]
    return [*blocks, *re.findall(r"`(python [^`]+)`", body)]


def shown_lines():
    """Every shell line README.md (set-up, Usage) and `--help` (conf/hydra/help/pretrain.yaml) show a user."""
    sections = _sections(README.read_text())
    help_header = yaml.safe_load((REPO / "conf" / "hydra" / "help" / "pretrain.yaml").read_text())["header"]
    lines = [*_lines_in(sections[""]), *_lines_in(sections["Usage"]),
             *(line.strip() for line in help_header.splitlines() if line.strip().startswith("python "))]
    return list(dict.fromkeys(lines))


def commands():
    """The `python ...` commands of those lines, split at `&&`, normalised (README quoting such as
    'parallel=glob(*)' and `# notes` parsed away), each once."""
    found = []
    for line in shown_lines():
        for part in line.split("&&"):
            words = shlex.split(part, comments=True)
            if words[:1] == ["python"]:
                found.append(shlex.join(words))
    return list(dict.fromkeys(found))


def _dry_sweep(args):
    """`--config-name NAME` of a sweep definition that is a dry run itself (sweeps/NAME.yaml)."""
    name = args[args.index("--config-name") + 1] if "--config-name" in args[:-1] else None
    path = REPO / "sweeps" / f"{name}.yaml"
    return name is not None and path.is_file() and yaml.safe_load(path.read_text()).get("dry_run") is True


def how_to_run(command):
    """(argv after `python`, None) to run it, or (None, why it is skipped)."""
    words = shlex.split(command)
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
        return None, f"a template: {' '.join(placeholders)} stands for a path the launcher passes"
    if module == "pretrain" and not (INFO_FLAGS & set(args) or DRY_ALREADY & set(args) or _dry_sweep(args)):
        args = [*args, "dry_run=true"]   # the real run trains (minutes); its dry run checks + plans it
    return ("-m", module, *args), None


# README's commands that take 10-20 s each (the data step over the sample corpus, the sweeps): run by
# CI's slow run, with the test_cli.py tests that read the same runs (run_once), to keep the default
# suite within its 5 minutes.
SLOW_COMMANDS = ("python -m pretrain.data", "python -m pretrain --config-name", "python -m pretrain -m ")


def _case(command):
    marks = [pytest.mark.slow] if command.startswith(SLOW_COMMANDS) else []
    return pytest.param(command, id=command[len("python -m "):] or command, marks=marks)


def test_the_parse_finds_the_set_up_usage_and_help_commands():
    """Guards the parser: if it found nothing, every README command would 'pass' unrun."""
    found = commands()
    assert "python -m pretrain" in found                                         # set-up and Usage
    assert "python -m pip install -e '.[test]'" in found                         # split at &&
    assert "python -m pytest -m slow" in found
    assert "python -m pretrain -m model=llama3_70b hardware=ascend910b_8x8 dry_run=true 'parallel=glob(*)'" \
        in found, "a quoted argument survives the parse"
    assert "python -m pretrain --config-name pangu_ultra_135b_1024" in found    # inline, in the prose
    assert "python -m pretrain --config-name llama3_70b_64" in found            # also in --help
    assert len(found) >= 12, found


@pytest.mark.parametrize("line", shown_lines())
def test_a_shell_accepts_the_line_as_shown(line):
    """What a user pastes: unquoted parentheses or a stray quote are a shell syntax error."""
    proc = subprocess.run(["bash", "-n", "-c", line], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"bash cannot parse {line!r}: {proc.stderr.strip()}"


@pytest.mark.parametrize("command", [_case(c) for c in commands()])
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


def test_the_group_lists_name_options_that_exist():
    """README's **Groups** bullet: `group` (a, b, …). Every name is an option in conf/GROUP/; a list
    without … names them all."""
    usage = _sections(README.read_text())["Usage"]
    bullet = next(b for b in usage.split("\n- ") if b.startswith("**Groups**"))
    lists = re.findall(r"`(\w+)` +\(([^)]*)\)", " ".join(bullet.split()))
    assert {g for g, _ in lists} >= {"model", "parallel", "phase", "hardware", "data"}, lists
    for group, names in lists:
        listed = [n.strip() for n in names.split(",")]
        shown = [n for n in listed if n != "…"]
        assert set(shown) <= set(options(group)), f"README lists {group} options that do not exist"
        if "…" not in listed:
            assert sorted(shown) == options(group), f"README's {group} list misses options (or add …)"


def test_ci_runs_the_readme_test_commands():
    """.ci/run is README's set-up for tests: the same install and both pytest runs (quietness aside)."""
    ci = [shlex.split(line, comments=True) for line in (REPO / ".ci" / "run").read_text().splitlines()]
    ci = [[w for w in words if w != "-q"] for words in ci]
    tests_set_up = re.compile(r"python -m (pytest\b|pip install .*\[test\])")
    readme = [shlex.split(c) for c in commands() if tests_set_up.match(c)]
    assert len(readme) >= 3, readme
    for words in readme:
        assert any(line[:len(words)] == words for line in ci), f".ci/run does not run {shlex.join(words)}"
