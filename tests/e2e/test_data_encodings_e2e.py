"""Input files in other encodings, and stray undecodable bytes (issue 37 item 5, issue 40 item 6).

Before: a GB18030 file lost every line with a Chinese character as `invalid_utf8` (its .txt form
all of it after the first one), without a word; one Latin-1 byte in a 3.9 MB UTF-8 .txt dropped
the rest of the file as `invalid_utf8 1`, no file named; UTF-16 files were counted as `binary`.
"""
from pretrain.data import prepare
from tests.helpers.data_cli import cli_data
from tests.helpers.data_files import ZH, data_cfg, paragraphs, write_jsonl


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


def test_prepare_accounts_for_a_dropped_line_and_warns_naming_it(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    write_jsonl(src / "a.jsonl", paragraphs()[:60])
    lines = [f"{p}\n" for p in paragraphs()[60:100]]
    raw = "".join(lines).encode()
    at = len("".join(lines[:20]).encode()) + 5
    (src / "b.txt").write_bytes(raw[:at] + b"\xe9" + raw[at:])
    m = prepare(data_cfg(tmp_path / "cache", {"web": [src]}), progress=False)["web"].manifest
    d = m["documents"]
    assert d["dropped"].get("invalid_utf8") == 1 and d["in"] == d["kept"] + sum(d["dropped"].values())
    assert d["undecodable"] == {"files": 1, "lines_dropped": 1, "first": [
        {"file": str(src / "b.txt"), "first_byte": at, "lines_dropped": 1, "reason": "invalid_utf8"}]}
    err = capsys.readouterr().err
    assert f"warning: {src / 'b.txt'}: invalid UTF-8 at byte {at:,}; dropped 1 line(s)" in err


def test_prepare_reads_a_gbk_file_with_the_key(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    write_jsonl(src / "a.jsonl", paragraphs()[:80])
    (src / "b.txt").write_bytes("\n".join(ZH).encode("gbk"))
    cfg = data_cfg(tmp_path / "cache", {"web": [src]}, **{"tokenizer.vocab_size": 600})
    cfg.sources.web.encoding = "gb18030"
    p = prepare(cfg, progress=False)["web"]
    assert p.manifest["documents"]["dropped"] == {} and "undecodable" not in p.manifest["documents"]
    from pretrain.data.docstore import DocStore
    store = DocStore(next((tmp_path / "cache").glob("clean/web-*")))
    assert "\n".join(ZH) in store.texts(0, len(store))
