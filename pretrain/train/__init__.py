"""Training: the LR schedule, the GRAPH-mode step, the Trainer loop, metrics and the runner
(`pretrain.train.runner.run(cfg)`). Only step.py/trainer.py/runner.py import mindspore, lazily."""
