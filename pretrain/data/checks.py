"""Prepared datasets (known only after preparation) against the model that will read them."""
from typing import Any, Dict

from omegaconf import DictConfig

from pretrain.config.errors import PretrainDataError
from pretrain.data.tokenizer import tokenizer_vocab_size


def check_prepared(cfg: DictConfig, prepared: Dict[str, Any]) -> None:
    """Prepared datasets (known only after preparation) against the model: sequence length and the
    tokenizer's real vocabulary."""
    for name, prep in prepared.items():
        if int(prep.seq_length) != int(cfg.model.seq_length):
            raise PretrainDataError(
                f"dataset {name} in {prep.dir} is packed for seq_length {prep.seq_length}, model.seq_length is "
                f"{cfg.model.seq_length}: set data.seq_length={cfg.model.seq_length} so it is re-packed, or use a "
                f"model of that length")
    for path in sorted({str(prep.tokenizer_path) for prep in prepared.values()}):
        vocab = tokenizer_vocab_size(path)
        if vocab != int(cfg.model.vocab_size):
            raise PretrainDataError(
                f"tokenizer {path} has a vocabulary of {vocab}, model.vocab_size is {cfg.model.vocab_size}: set "
                f"model.vocab_size={vocab} or use a tokenizer of {cfg.model.vocab_size} pieces")
