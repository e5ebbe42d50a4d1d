"""Input files in other encodings, and stray undecodable bytes (issue 37 item 5, issue 40 item 6).

Before: a GB18030 file lost every line with a Chinese character as `invalid_utf8` (its .txt form
all of it after the first one), without a word; one Latin-1 byte in a 3.9 MB UTF-8 .txt dropped
the rest of the file as `invalid_utf8 1`, no file named; UTF-16 files were counted as `binary`.
"""
from tests.unit.test_data_odd_files import cli_data
from tests.unit.test_data_pipeline import paragraphs, write_jsonl

ZH = ["北京是中华人民共和国的首都，也是全国的政治中心和文化中心，有三千多年的建城史。",
      "长江是中国第一长河，全长约六千三百公里，流经青海、西藏、四川、云南等十一个省级行政区。",
      "今天天气很好，我们一家人去公园散步，看到很多老人在下棋，孩子们在草地上放风筝。",
      "这本书讲述了一个普通农民家庭在改革开放以后四十年里的生活变化，语言朴实，感情真挚。",
      "研究人员发现，适量运动可以改善睡眠质量，并且有助于降低心血管疾病的发病风险。"]


def test_cli_refuses_a_gbk_corpus_in_one_line_and_leaves_nothing(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    write_jsonl(corpus / "a.jsonl", paragraphs()[:30])
    (corpus / "b.txt").write_bytes("\n".join(ZH).encode("gbk"))
    proc = cli_data(tmp_path, "data.sources.general.paths=[corpus]")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.splitlines() == [
        "error: corpus/b.txt is not UTF-8 (it looks like gb18030); set data.sources.general.encoding="
        "gb18030 (the encoding of the source's files that are not UTF-8), or convert the file to UTF-8"]
    assert not (tmp_path / "cache" / "datasets").exists()
