"""A user's own config option without its `defaults:` line (issue 40): the option's files and the one
line that must name every mandatory key it leaves unset."""

MINE = "name: mine\nhidden_size: 128\n"
# every mandatory (???) key of the model schema that MINE does not set, in the schema's order
UNSET = ["model.num_layers", "model.num_heads", "model.num_kv_heads", "model.ffn_hidden_size",
         "model.vocab_size", "model.seq_length", "model.max_position_embeddings", "model.global_batch_size",
         "model.total_tokens", "model.lr_peak"]
FIX = "`defaults: [tiny, _self_]`"


def own_option_dir(root):
    """root/myconf with model/mine.yaml (name and hidden_size only) and data/mine.yaml (a name and a
    source)."""
    conf = root / "myconf"
    (conf / "model").mkdir(parents=True)
    (conf / "model" / "mine.yaml").write_text(MINE)
    (conf / "data").mkdir()
    (conf / "data" / "mine.yaml").write_text("name: mine\nsources:\n  general:\n    builtin: general\n")
    return conf


def assert_unset_line(text: str) -> None:
    """text holds the one line naming every key MINE leaves unset and the `defaults:` line that fixes it."""
    said = f"model=mine leaves {len(UNSET)} keys of the model schema unset: {', '.join(UNSET)}; "
    assert said in text, text
    assert FIX in text and "available: llama3_70b, llama3_8b" in text, text
