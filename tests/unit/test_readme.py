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
import re
import shlex

from tests.helpers.repo import REPO, options
from tests.helpers.shown_commands import DOCS, README, code_lines, commands


def _sections(text):
    """{title: body}; the text above the first '## ' heading is under ''."""
    parts = re.split(r"^## +(.+)$", text, flags=re.MULTILINE)
    return {"": parts[0], **{parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}}


def test_the_parse_finds_the_set_up_tour_docs_and_help_commands():
    """Guards the parser: if it found nothing, every README command would 'pass' unrun."""
    found = commands()
    assert "python -m pretrain" in found                                         # set-up and tour
    assert "python -m pip install -e '.[test]'" in found                         # split at &&
    assert "python -m pytest -m slow" in found
    assert "python -m pretrain -m model=llama3_70b hardware=ascend910b_8x8 dry_run=true 'parallel=glob(*)'" \
        in found, "a quoted argument survives the parse"
    assert "python -m pretrain --config-name pangu_ultra_135b_1024" in found    # inline, in the prose
    assert "python -m pretrain --config-name llama3_70b_64" in found            # also in --help
    assert "python -m pretrain parallel=dp2 hardware=cpu_2x1" in found          # a docs page's prose
    assert "python -m pretrain.tools.imports" in found                          # a docs page's block
    assert len(found) >= 30, found


def test_the_group_lists_name_options_that_exist():
    """docs/configuration.md's **Groups** bullet: `group` (a, b, …). Every name is an option in
    conf/GROUP/; a list without … names them all."""
    groups = _sections((REPO / "docs" / "configuration.md").read_text())["Groups"]
    bullet = next(b for b in groups.split("\n- ") if b.startswith("**Groups**"))
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
    set_up = commands(code_lines(_sections(README.read_text())[""]))   # above README's first section
    readme = [shlex.split(c) for c in set_up if tests_set_up.match(c)]
    assert len(readme) >= 3, readme
    for words in readme:
        assert any(line[:len(words)] == words for line in ci), f".ci/run does not run {shlex.join(words)}"


def test_readme_is_short_and_opens_with_the_two_set_up_commands():
    """README is the way in (at most 150 lines); its first commands set up and run, then set up and test."""
    text = README.read_text()
    assert text.count("\n") <= 150, "README.md is over 150 lines: move the detail into a docs/ page"
    first = commands(code_lines(_sections(text)[""]))
    assert first[:2] == ["python -m pip install -e .", "python -m pretrain"], first
    assert first[2:] == ["python -m pip install -e '.[test]'", "python -m pytest", "python -m pytest -m slow"], first


def _anchors(page):
    """GitHub's anchors of a page's headings: lower case, punctuation but '-' and '_' dropped, spaces -> '-'."""
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+ +(.+)$", page.read_text(), flags=re.MULTILINE)}


def test_readme_links_every_docs_page_and_every_link_lands():
    """One line per docs page in README, and no link in README or docs/ to a page or heading that moved."""
    readme = README.read_text()
    assert DOCS, "no docs/*.md pages"
    for page in DOCS:
        assert f"](docs/{page.name})" in readme, f"README has no line for docs/{page.name}"
    for page in (README, *DOCS):
        for target in re.findall(r"\]\(([^)#\s]*\.md)?(?:#([^)\s]+))?\)", page.read_text()):
            path = (page.parent / target[0]).resolve() if target[0] else page
            assert path.is_file(), f"{page.name} links to a missing page {target[0]}"
            assert not target[1] or target[1] in _anchors(path), \
                f"{page.name} links to #{target[1]}, which {path.name} has no heading for"
