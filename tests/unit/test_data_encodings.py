"""Input files in other encodings, and stray undecodable bytes (issue 37 item 5, issue 40 item 6).

Before: a GB18030 file lost every line with a Chinese character as `invalid_utf8` (its .txt form
all of it after the first one), without a word; one Latin-1 byte in a 3.9 MB UTF-8 .txt dropped
the rest of the file as `invalid_utf8 1`, no file named; UTF-16 files were counted as `binary`.
"""
import codecs
import gzip
import json

import pytest

from pretrain.config.errors import PretrainConfigError, PretrainDataError
from pretrain.config.validate import check_data_config
from pretrain.data.charsets import Decoding
from pretrain.data.prepare import _plan
from pretrain.data.sources import Doc, Drop, read_documents, read_jsonl_range
from tests.helpers.data_files import ZH, data_cfg, paragraphs, write_jsonl


def read(paths, encoding=None, max_chars=1_000_000):
    return list(read_documents(paths, "text", max_chars, decoding=Decoding("general", encoding)))


def jsonl_bytes(texts, codec="utf-8") -> bytes:
    return "".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts).encode(codec)


def one_line(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert "\n" not in msg, msg
    return msg


# ---------------------------------------------------------------- other encodings

@pytest.mark.parametrize("name", ["zh.txt", "zh.jsonl"])
def test_a_gb18030_file_is_refused_naming_the_file_the_encoding_and_the_key(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(jsonl_bytes(ZH, "gb18030") if name.endswith("jsonl") else "\n".join(ZH).encode("gb18030"))
    with pytest.raises(PretrainDataError) as exc:          # was: 5 invalid_utf8 (.txt: 1), no word
        read([path])
    msg = one_line(exc)
    assert msg.startswith(f"{path} is not UTF-8 (it looks like gb18030)"), msg
    assert "set data.sources.general.encoding=gb18030" in msg


def test_the_source_encoding_reads_its_gb18030_files_beside_its_utf8_ones(tmp_path):
    (tmp_path / "a.txt").write_text("\n".join(ZH), encoding="utf-8")
    (tmp_path / "b.txt").write_bytes("\n".join(ZH[::-1]).encode("gb18030"))
    (tmp_path / "c.jsonl").write_bytes(jsonl_bytes(ZH, "gb18030"))
    (tmp_path / "d.jsonl.gz").write_bytes(gzip.compress(jsonl_bytes(ZH[:2])))
    items = read(sorted(tmp_path.iterdir()), encoding="gb18030")
    assert all(isinstance(i, Doc) for i in items), items
    assert [i.text for i in items] == ["\n".join(ZH), "\n".join(ZH[::-1]), *ZH, *ZH[:2]]


def test_a_file_in_neither_utf8_nor_the_source_encoding_is_refused(tmp_path):
    path = tmp_path / "fr.txt"
    path.write_bytes("Le café était très agréable, à côté de la fenêtre ouverte.\n".encode("latin-1") * 30)
    with pytest.raises(PretrainDataError) as exc:
        read([path])
    assert "is not UTF-8 (it looks like cp1252); set data.sources.general.encoding=cp1252" in one_line(exc)
    with pytest.raises(PretrainDataError) as exc:
        read([path], encoding="gb18030")                   # not mojibake of the wrong encoding
    assert "is neither UTF-8 nor data.sources.general.encoding=gb18030 (it looks like cp1252)" in one_line(exc)
    assert read([path], encoding="cp1252")[0].text.startswith("Le café était très agréable")


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be", "utf-32-le", "utf-8"])
def test_a_byte_order_mark_decodes_utf16_utf32_and_utf8(tmp_path, codec):
    bom = {"utf-16-le": codecs.BOM_UTF16_LE, "utf-16-be": codecs.BOM_UTF16_BE,
           "utf-32-le": codecs.BOM_UTF32_LE, "utf-8": codecs.BOM_UTF8}[codec]
    texts = [ZH[0], "plain English, then 中文 mixed in", ZH[1]]
    (tmp_path / "a.txt").write_bytes(bom + "\n".join(texts).encode(codec))
    (tmp_path / "b.jsonl").write_bytes(bom + jsonl_bytes(texts, codec))
    (tmp_path / "c.jsonl.gz").write_bytes(gzip.compress(bom + jsonl_bytes(texts, codec)))
    items = read(sorted(tmp_path.iterdir()))
    assert [i.text if isinstance(i, Doc) else i for i in items] == ["\n".join(texts), *texts, *texts]  # was: binary


def test_utf16_without_a_byte_order_mark_is_refused_or_read_as_the_key_says(tmp_path):
    path = tmp_path / "win.txt"
    path.write_bytes("plain English text written by a Windows tool\r\n".encode("utf-16-le") * 20)
    with pytest.raises(PretrainDataError) as exc:
        read([path])
    assert "(it looks like utf-16-le without a byte order mark); set data.sources.general.encoding=utf-16-le" \
        in one_line(exc)
    assert read([path], encoding="utf-16")[0].text.startswith("plain English text written by a Windows tool\r\n")


# ---------------------------------------------------------------- stray bytes

def _lines(n: int):
    words = " ".join(paragraphs()[:40]).split()
    return [" ".join(words[(i * 7) % 500:(i * 7) % 500 + 12]) + f" ({i})\n" for i in range(n)]


@pytest.mark.parametrize("at_line", [3, 1300, 25_000])   # in the head, across the first block, far on
def test_a_stray_byte_in_a_large_txt_drops_its_line_and_names_the_offset(tmp_path, at_line):
    lines = _lines(50_000)                                  # ~3.9 MB
    raw = [ln.encode() for ln in lines]
    raw[at_line] = raw[at_line][:10] + b"\xe9" + raw[at_line][10:]     # one Latin-1 byte
    path = tmp_path / "big.txt"
    path.write_bytes(b"".join(raw))
    assert 3.5e6 < path.stat().st_size < 4.5e6
    items = read([path], max_chars=1_000_000)
    drops = [i for i in items if isinstance(i, Drop)]
    offset = sum(map(len, raw[:at_line])) + 10
    assert drops == [Drop("invalid_utf8", where=(str(path), offset))]    # was: invalid_utf8 1, the rest lost
    docs = [i for i in items if isinstance(i, Doc)]
    assert "".join(d.text for d in docs) == "".join(lines[:at_line] + lines[at_line + 1:])
    assert all(len(d.text) <= 1_000_000 for d in docs) and len({d.key for d in docs}) == 1


def test_a_stray_byte_on_a_line_without_an_end_drops_a_bounded_span(tmp_path):
    text = " ".join(paragraphs()[:200])                     # one line of ~90 kB
    path = tmp_path / "one-line.txt"
    half = len(text) // 2
    path.write_bytes(text[:half].encode() + b"\xff" + text[half:].encode())
    items = read([path])
    assert [type(i) for i in items] == [Doc, Drop, Doc]
    kept = items[0].text + items[2].text
    assert 2_000 < len(text) - len(kept) < 2 * 1024 + 2      # the words around it, not the file
    assert text.startswith(items[0].text) and text.endswith(items[2].text)


def test_a_stray_byte_in_a_jsonl_drops_that_document_in_any_split(tmp_path):
    texts = paragraphs()[:300]
    lines = [json.dumps({"text": t}).encode() + b"\n" for t in texts]
    lines[200] = lines[200][:20] + b"\x92" + lines[200][20:]        # a cp1252 quote
    path = tmp_path / "a.jsonl"
    path.write_bytes(codecs.BOM_UTF8 + b"".join(lines))
    whole = read([path])
    where = (str(path), 3 + sum(map(len, lines[:200])) + 20)
    assert [i for i in whole if isinstance(i, Drop)] == [Drop("invalid_utf8", where=where)]
    assert [i.text for i in whole if isinstance(i, Doc)] == texts[:200] + texts[201:]
    size = path.stat().st_size
    for step in (1000, 7777, size):
        parts = [i for a in range(0, size, step)
                 for i in read_jsonl_range(path, a, min(a + step, size), "text", 1_000_000, Decoding("general"))]
        assert parts == whole, step


# ---------------------------------------------------------------- the key

def test_the_encoding_is_part_of_the_clean_key_only_when_set(tmp_path):
    write_jsonl(tmp_path / "a.jsonl", ["one document", "another one"])
    cfg = data_cfg(tmp_path / "cache", {"web": [tmp_path / "a.jsonl"]})
    keys = set()
    for value in (None, "gb18030", "big5"):
        cfg.sources.web.encoding = value
        keys.add(_plan("web", cfg.sources.web, cfg).clean_key)
    assert len(keys) == 3


@pytest.mark.parametrize("value, says", [("gbk2", "is not a text encoding Python knows"),
                                         ("hex", "is not a text encoding Python knows"),
                                         ("iso2022_jp", "has a shift state")])
def test_an_encoding_that_cannot_be_used_is_one_config_line(tmp_path, value, says):
    cfg = data_cfg(tmp_path / "cache", {"web": [write_jsonl(tmp_path / "a.jsonl", ["x"])]})
    cfg.sources.web.encoding = value
    with pytest.raises(PretrainConfigError, match=f"^data.sources.web.encoding='{value}' {says}"):
        check_data_config(cfg)
