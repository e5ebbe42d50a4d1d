"""Issue 40 item 4: a vocabulary smaller than the corpus's characters. Was a 34-line sentencepiece
traceback and exit 1 from `python -m pretrain.data` and `python -m pretrain`, and the training command
left config.yaml and plan.json in its run dir. Now one line naming model.vocab_size and the minimum
(sentencepiece's own: the characters character_coverage keeps plus the byte and special pieces),
exit 2, and the run dir's config.yaml and plan.json are written only once the data is ready."""
import random
import re

from pretrain.data.chinese import prose
from tests.helpers import cli

NEEDS = re.compile(r"^error: model\.vocab_size=300 is too small for this corpus: its tokenizer needs "
                   r"at least (\d+) pieces .*set model\.vocab_size=\1 or more, "
                   r"or lower data\.tokenizer\.character_coverage$")


def _chinese(n: int, seed: int = 0) -> list:
    rng = random.Random(seed)
    return [prose().paragraph(rng, 12) for _ in range(n)]


def _corpus(root) -> None:
    (root / "data" / "general").mkdir(parents=True)
    for i, text in enumerate(_chinese(40, seed=1)):
        (root / "data" / "general" / f"{i}.txt").write_text(text, encoding="utf-8")


def _run(cwd, module: str, *args: str):
    args = ("data=files", "~data.sources.reasoning", "~data.sources.anneal", "model.vocab_size=300",
            "model.seq_length=64", "model.max_position_embeddings=64", "data.workers=1", *args)
    return cli.run(*args, cwd=cwd, module=module, timeout=300)


def _one_line(proc) -> str:
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert NEEDS.match(lines[0]), lines[0]
    return lines[0]


def test_data_command_says_it_in_one_line(tmp_path):
    _corpus(tmp_path)
    _one_line(_run(tmp_path, "pretrain.data"))
    assert not list((tmp_path / "cache").rglob(".*tmp*"))          # no half-trained tokenizer left


def test_training_command_says_it_and_leaves_no_config_or_plan(tmp_path):
    _corpus(tmp_path)
    run_dir = tmp_path / "run"
    _one_line(_run(tmp_path, "pretrain", f"run_dir={run_dir}", "phase=general"))
    assert not (run_dir / "config.yaml").exists() and not (run_dir / "plan.json").exists()
    assert not [p for p in run_dir.iterdir() if not p.name.startswith(".")]   # the lock and marker only
