"""The tiny model shrunk to ~0.6M parameters at seq 64 (a process trains in seconds after its graph
compiles): the overrides the benchmarks (pretrain.bench) and the end-to-end tests share."""

SMALL_MODEL = ["model.hidden_size=64", "model.num_layers=2", "model.num_heads=4", "model.num_kv_heads=2",
               "model.ffn_hidden_size=128", "model.seq_length=64", "model.max_position_embeddings=64"]
