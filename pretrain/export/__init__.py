"""Export a run's checkpoint as a Hugging Face model directory (`python -m pretrain.export`).

source (which checkpoint, its weights) -> architecture (which transformers class) -> names (Mcore
names and fused layouts to transformers') -> hf_dir (safetensors shards, all or nothing) + hf_config
+ tokenizer_files; reference is the NumPy forward pass the export is checked against (check.py).
No module here imports mindspore at import time.
"""
