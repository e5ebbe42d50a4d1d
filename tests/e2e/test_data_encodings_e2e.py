"""Input files in other encodings, and stray undecodable bytes (issue 37 item 5, issue 40 item 6).

Before: a GB18030 file lost every line with a Chinese character as `invalid_utf8` (its .txt form
all of it after the first one), without a word; one Latin-1 byte in a 3.9 MB UTF-8 .txt dropped
the rest of the file as `invalid_utf8 1`, no file named; UTF-16 files were counted as `binary`.
"""
from tests.helpers.data_cli import cli_data
from tests.helpers.data_files import ZH, paragraphs, write_jsonl


def test_cli_refuses_a_gbk_corpus_in_one_line_and_leaves_nothing(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    write_jsonl(corpus / "a.jsonl", paragraphs()[:30])
    (corpus / "b.txt").write_bytes("\n".join(ZH).encode("gbk"))
    proc = cli_data(tmp_path, "data.sources.general.paths=[corpus]", timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.splitlines() == [
        "error: corpus/b.txt is not UTF-8 (it looks like gb18030); set data.sources.general.encoding="
        "gb18030 (the encoding of the source's files that are not UTF-8), or convert the file to UTF-8"]
    assert not (tmp_path / "cache" / "datasets").exists()
