"""The shrunken models every training test uses. SMALL_MODEL (pretrain.config.shrunken, which the
benchmarks share): the tiny architecture at ~0.6M parameters and seq 64, over the sample corpus and its
4096-piece tokenizer. SHRINK: the same at vocab 512 and seq 32, for tests that feed their own token arrays."""
from pretrain.config.shrunken import SMALL_MODEL

_LENGTHS = ("model.seq_length=", "model.max_position_embeddings=")
SHRINK = [*(o for o in SMALL_MODEL if not o.startswith(_LENGTHS)),
          "model.vocab_size=512", "model.seq_length=32", "model.max_position_embeddings=32"]
