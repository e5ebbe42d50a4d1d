"""pretrain: Hydra config composition, planning, data and resilient training for MindSpore/MindFormers."""
__version__ = "0.1.0"
