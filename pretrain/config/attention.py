"""How packed documents are kept apart in attention: one decision of the config, read by the rules
(config/validate.py), the MindFormers export (model/mindformers_config.py) and the input feeds."""
from typing import Any

# MindFormers' CausalMaskGenerate refuses mask compression below this sequence length
MIN_COMPRESSED_SEQ = 2048


def document_attention(cfg: Any) -> str:
    """How packed documents are kept apart (pretrain/train/inputs.py feeds each mode):
    "off" (data.document_mask=false: causal over the whole row); "compressed" on Ascend from
    seq_length 2048, MindFormers' compressed EOD mask (use_eod_attn_mask_compression, flash
    attention in TND layout fed actual_seq_len); "mask" otherwise (CPU, or shorter Ascend rows),
    MindFormers' attention_mask input carrying the block-diagonal causal mask."""
    if not bool(cfg.data.document_mask):
        return "off"
    if cfg.hardware.device != "cpu" and int(cfg.model.seq_length) >= MIN_COMPRESSED_SEQ:
        return "compressed"
    return "mask"
