"""What the MindFormers model is fed for one micro-batch, from a loader batch (numpy, no mindspore).

A loader batch carries, per packed row, segment_ids (1, 2, ... per document piece, 0 on padding)
and position_ids (restarting at 0 per piece). How documents are kept apart is one of three modes
(mindformers_config.document_attention decides which, from data.document_mask and the device):

- "off": input_ids, labels, loss_mask only; MindFormers builds its causal mask over the whole row.
- "mask": + position_ids (use_eod_reset restarts RoPE per document) + attention_mask [B, 1, S, S]
  uint8, 1 = masked, the block-diagonal causal mask: query i sees key j iff j <= i and both are in
  the same piece (padding is one trailing piece of its own). MindFormers' `attention_mask` input,
  which its CausalMaskGenerate would otherwise make; the CPU core attention applies it as is.
- "compressed": + position_ids + actual_seq_len [B, EOD_PAD_LENGTH] int32, MindFormers' compressed
  EOD mask for flash attention's TND layout on Ascend: each row's piece end offsets, padded with the
  row's end, offset by b·S so the batch reads as one flat sequence (MindFormers' asl_batch_wrapper
  format); its fused kernel applies the same block-diagonal causal mask.

Keys are the model's construct argument names, in the order the step feeds them.
"""

from typing import Dict

import numpy as np

from pretrain.config.errors import PretrainDataError

MODES = ("off", "mask", "compressed")
# MindFormers' default `eod_pad_length`: piece boundaries per row that actual_seq_len can carry
EOD_PAD_LENGTH = 128


def segments(batch: Dict[str, np.ndarray]) -> np.ndarray:
    """segment_ids of a batch; a batch without them (synthetic test batches) is one document per row."""
    if "segment_ids" in batch:
        return np.asarray(batch["segment_ids"])
    return np.ones(np.shape(batch["input_ids"]), np.int32)


def positions(batch: Dict[str, np.ndarray]) -> np.ndarray:
    if "position_ids" in batch:
        return np.asarray(batch["position_ids"], np.int32)
    rows, seq = np.shape(batch["input_ids"])
    return np.broadcast_to(np.arange(seq, dtype=np.int32), (rows, seq)).copy()


def attention_mask(segment_ids: np.ndarray) -> np.ndarray:
    """[B, 1, S, S] uint8, 1 where query i must not see key j (another piece, or the future)."""
    seg = np.asarray(segment_ids)
    seq = seg.shape[1]
    same = seg[:, :, None] == seg[:, None, :]
    causal = np.tril(np.ones((seq, seq), bool))
    return (~(same & causal)).astype(np.uint8)[:, None]


def actual_seq_len(segment_ids: np.ndarray, pad_length: int = EOD_PAD_LENGTH) -> np.ndarray:
    """[B, pad_length] int32: per row the end offsets of its pieces (the last one = S), padded with
    S, plus b·S for row b."""
    seg = np.asarray(segment_ids)
    rows, seq = seg.shape
    out = np.full((rows, pad_length), seq, np.int32)
    for b in range(rows):
        ends = np.flatnonzero(seg[b, 1:] != seg[b, :-1]) + 1
        if len(ends) >= pad_length:
            raise PretrainDataError(
                f"a packed row holds {len(ends) + 1} document pieces, more than MindFormers' compressed "
                f"EOD mask carries (eod_pad_length {pad_length}); set data.document_mask=false, or filter "
                f"very short documents out (data.clean) so fewer fit one row"
            )
        out[b, : len(ends)] = ends
    return out + (np.arange(rows, dtype=np.int32) * seq)[:, None]


def model_arrays(batch: Dict[str, np.ndarray], mode: str) -> Dict[str, np.ndarray]:
    """The model's inputs for `mode`, as numpy arrays keyed by its construct argument names."""
    if mode not in MODES:
        raise ValueError(f"document attention mode {mode!r}: one of {MODES}")
    out = {
        "input_ids": np.asarray(batch["input_ids"], np.int32),
        "labels": np.asarray(batch["labels"], np.int32),
        "loss_mask": np.asarray(batch["loss_mask"], np.float32),
    }
    if mode == "off":
        return out
    out["position_ids"] = positions(batch)
    if mode == "mask":
        out["attention_mask"] = attention_mask(segments(batch))
    else:
        out["actual_seq_len"] = actual_seq_len(segments(batch))
    return out
