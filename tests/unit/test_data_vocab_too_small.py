"""Issue 40 item 4: a vocabulary smaller than the corpus's characters. Was a 34-line sentencepiece
traceback and exit 1 from `python -m pretrain.data` and `python -m pretrain`, and the training command
left config.yaml and plan.json in its run dir. Now one line naming model.vocab_size and the minimum
(sentencepiece's own: the characters character_coverage keeps plus the byte and special pieces),
exit 2, and the run dir's config.yaml and plan.json are written only once the data is ready."""
import random
import re
from types import SimpleNamespace

import pytest

from pretrain.config.errors import PretrainDataError
from pretrain.data.chinese import prose
from pretrain.data.tokenizer import tokenizer_vocab_size, train


def _chinese(n: int, seed: int = 0) -> list:
    rng = random.Random(seed)
    return [prose().paragraph(rng, 12) for _ in range(n)]


def _cfg(vocab: int) -> SimpleNamespace:
    return SimpleNamespace(vocab_size=vocab, model_type="bpe", byte_fallback=True, train_sentences=100000,
                           character_coverage=0.9995)


def test_the_error_names_the_minimum_and_the_minimum_trains(tmp_path):
    texts = _chinese(150)
    with pytest.raises(PretrainDataError) as info:
        train(iter(texts), tmp_path, _cfg(300), threads=1)
    message = str(info.value)
    assert "\n" not in message and message.startswith("model.vocab_size=300 is too small")
    need = int(re.search(r"needs at least (\d+) pieces", message).group(1))
    assert need > 256 + 300 // 2                      # ~ every Han character of the text, and the 256 bytes
    assert tokenizer_vocab_size(train(iter(texts), tmp_path, _cfg(need), threads=1)) == need
    with pytest.raises(PretrainDataError, match=f"needs at least {need} pieces"):
        train(iter(texts), tmp_path, _cfg(need - 1), threads=1)
