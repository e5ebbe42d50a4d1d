"""Training: the LR schedule, the GRAPH-mode step, the Trainer, the loop
(`pretrain.train.loop.train_rank(resolved_run)`), what it is built from (build.py), metrics and the run's
summary. Only step.py/trainer.py/build.py/loop.py
import mindspore, lazily."""
