"""The model inputs of each document-attention mode (pretrain/train/inputs.py), from loader batches:
the block-diagonal causal mask the CPU core attention applies and the actual_seq_len Ascend's
compressed EOD mask reads describe the same documents, in MindFormers' own format."""

import numpy as np
import pytest

from pretrain.config.errors import PretrainDataError
from pretrain.train import inputs
from tests.helpers.packed_rows import SEQ, packed


def test_attention_mask_is_causal_within_each_document_only():
    batch = packed([5, 4], [17])
    mask = inputs.attention_mask(batch["segment_ids"])
    assert mask.shape == (2, 1, SEQ, SEQ) and mask.dtype == np.uint8
    seen = mask[0, 0] == 0
    assert seen[4, :5].all() and not seen[4, 5:].any()          # A's EOD sees A only
    assert seen[8, 5:9].all() and not seen[8, :5].any()         # B sees B only, not A
    assert not seen[5, 6:].any()                                # nor its own future
    assert seen[12, 9:13].all() and not seen[12, :9].any()      # padding keeps to itself
    np.testing.assert_array_equal(mask[1, 0], np.triu(np.ones((SEQ, SEQ), np.uint8), 1))  # one document


def test_too_many_documents_for_the_compressed_mask_is_refused_by_name():
    batch = packed([2] * 8)
    message = r"8 document pieces.*eod_pad_length 4.*data\.document_mask=false"
    with pytest.raises(PretrainDataError, match=message):
        inputs.actual_seq_len(batch["segment_ids"], pad_length=4)


def test_each_mode_feeds_what_its_model_reads():
    batch = packed([5, 4])
    assert list(inputs.model_arrays(batch, "off")) == ["input_ids", "labels", "loss_mask"]
    mask = inputs.model_arrays(batch, "mask")
    assert list(mask) == ["input_ids", "labels", "loss_mask", "position_ids", "attention_mask"]
    assert list(mask["position_ids"][0, :10]) == [0, 1, 2, 3, 4, 0, 1, 2, 3, 0]   # restart per document
    assert "actual_seq_len" in inputs.model_arrays(batch, "compressed")
    synthetic = {k: batch[k] for k in ("input_ids", "labels", "loss_mask")}     # no segments: one doc a row
    np.testing.assert_array_equal(inputs.model_arrays(synthetic, "mask")["position_ids"][0], np.arange(SEQ))
