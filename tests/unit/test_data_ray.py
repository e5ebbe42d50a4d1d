"""The byte ranges data.engine=ray reads a large jsonl file in (tests/e2e/test_data_ray_e2e.py runs the
engines themselves): together they yield what one read of the file does."""
import json


def test_a_jsonl_file_read_in_byte_ranges_yields_what_one_read_does(tmp_path):
    from pretrain.data.sources import read_documents, read_jsonl_range
    lines = [json.dumps({"text": f"document {i} " + "word " * (i % 37)}) for i in range(100)]
    lines[5], lines[17], lines[40] = "", '{"text": broken', json.dumps({"other": 1})
    path = tmp_path / "a.jsonl"
    path.write_text("\n".join(lines) + "\n\n")
    whole = list(read_documents([path], "text", 10_000))
    size = path.stat().st_size
    for step in (1, 7, 100, 1000, size):
        parts = [i for a in range(0, size, step)
                 for i in read_jsonl_range(path, a, min(a + step, size), "text", 10_000)]
        assert parts == whole, step
