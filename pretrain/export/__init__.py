"""Export a run's checkpoint as a Hugging Face model directory (`python -m pretrain.export`).

source (which checkpoint, its weights) -> architecture (which transformers class) -> names (Mcore
names and fused layouts to transformers') -> hf_dir (safetensors shards, all or nothing) + hf_config
+ tokenizer_files. check.py compares the export with the run's own model (reference.py: a NumPy
forward pass written from transformers' modeling code); synthetic.py makes a large random
checkpoint to time an export. No module here imports mindspore at import time.
"""
