"""The named options of the data block's string keys, declared here so the rules (config/validate.py)
read them without importing the data pipeline that implements each (pretrain/data/)."""

NORMALIZE_FORMS = ("NFC", "NFKC", "NFD", "NFKD", "none")   # data.clean.normalize (data/clean.py)
DATA_ENGINES = ("local", "ray")                             # data.engine (data/engine.py)
PACKING_METHODS = ("best_fit", "concat")                    # data.packing (data/pack.py)
# data.sources.*.builtin. data/sample.py keeps its own BUILTINS: the sha256 of its source fingerprints
# the generated corpus, so editing it rebuilds every cached sample dataset; tests/test_layers.py
# checks the two lists agree.
BUILTIN_SOURCES = ("general", "reasoning", "anneal")
