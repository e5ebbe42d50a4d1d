"""The model inputs of each document-attention mode (pretrain/train/inputs.py), from loader batches:
the block-diagonal causal mask the CPU core attention applies and the actual_seq_len Ascend's
compressed EOD mask reads describe the same documents, in MindFormers' own format."""

import numpy as np

from pretrain.train import inputs
from tests.helpers.packed_rows import EOD, SEQ, packed


def test_actual_seq_len_matches_mindformers_and_describes_the_same_mask(mindformers):
    from mindformers.dataset.blended_datasets.gpt_dataset import _get_eod_attention_mask
    from mindformers.dataset.causal_language_model_dataset import asl_batch_wrapper

    batch = packed([5, 4], [17], [3, 3, 3, 7])
    got = inputs.actual_seq_len(batch["segment_ids"], pad_length=8)
    per_row = [_get_eod_attention_mask(x, EOD, 8) for x in batch["input_ids"]]
    (expected,) = asl_batch_wrapper(*[per_row], None, micro_batch_num=1)   # + per-row offsets b·S
    np.testing.assert_array_equal(got, np.stack(expected))
    # the block-diagonal mask rebuilt from actual_seq_len (what flash attention's TND layout reads)
    for b, ends in enumerate(got - (np.arange(len(got)) * SEQ)[:, None]):
        seg = np.searchsorted(np.unique(ends), np.arange(SEQ), side="right")
        np.testing.assert_array_equal(inputs.attention_mask(seg[None])[0],
                                      inputs.attention_mask(batch["segment_ids"][b: b + 1])[0])
