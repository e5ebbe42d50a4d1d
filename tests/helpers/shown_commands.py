"""The shell lines README.md, docs/*.md and `--help` (conf/hydra/help/pretrain.yaml) show a user, and
the `python ...` commands in them: what test_readme checks (fast) and runs (e2e)."""
import re
import shlex

import yaml

from tests.helpers.repo import REPO

README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))


def code_lines(body):
    """Lines of indented code blocks and inline `python ...` spans: what a user would paste. A ```
    fence holds text that is not a shell line (a file tree), so it is left out."""
    body = re.sub(r"^```.*?^```", "", body, flags=re.MULTILINE | re.DOTALL)
    blocks = [line.strip() for line in body.splitlines() if line.startswith("    ") and line.strip()]
    return [*blocks, *re.findall(r"`(python [^`]+)`", body)]


def shown_lines():
    """Every shell line README.md, docs/*.md and `--help` (conf/hydra/help/pretrain.yaml) show a user."""
    lines = [*(line for page in (README, *DOCS) for line in code_lines(page.read_text())), *help_lines()]
    return list(dict.fromkeys(lines))


def help_lines():
    """The `python ...` lines of `--help`'s header."""
    header = yaml.safe_load((REPO / "conf" / "hydra" / "help" / "pretrain.yaml").read_text())["header"]
    return [line.strip() for line in header.splitlines() if line.strip().startswith("python ")]


def commands(lines=None):
    """The `python ...` commands of those lines (or of `lines`), split at `&&`, normalised (README
    quoting such as 'parallel=glob(*)' and `# notes` parsed away), each once."""
    found = []
    for line in shown_lines() if lines is None else lines:
        for part in line.split("&&"):
            words = shlex.split(part, comments=True)
            if words[:1] == ["python"]:
                found.append(shlex.join(words))
    return list(dict.fromkeys(found))
