"""Our LR schedule (pretrain/train/schedule.py) as a MindFormers LR class, so MindFormers' trainer
steps the learning rate by exactly the function of the step our loop uses.

MindFormers 1.9.0's own classes differ from ours: they evaluate at the optimizer's global step
before it is incremented (the first update sees step 0, so warmup starts at warmup_lr_init, one step
behind ours), LinearWithWarmUpLR decays to 0 rather than lr.end, and none starts a phase from the LR
the previous phase ended at. `PretrainPhaseLR` is one phase of our curriculum: the optimizer's
global step g (which a resumed MindFormers run restores from its checkpoint, and which a phase
continues from the previous phase's final checkpoint) is phase step i = g - first_step, and the LR
is schedule.lr_at(phase, i), clamped to the phase's first/last step outside it.

`register()` adds it to MindFormers' registry (idempotent); the yaml names it as
`lr_schedule.type: PretrainPhaseLR`. mindspore is imported only there.
"""

import math
from typing import Any, Dict

from pretrain.train.schedule import PhaseLR

# lazy imports (mindspore, mindformers): by design, their 3-10 s import stays out of planning and dry runs

LR_TYPE = "PretrainPhaseLR"
_registered = False


def lr_block(phase: PhaseLR, first_step: int) -> Dict[str, Any]:
    """The yaml's lr_schedule for one phase that starts at optimizer step `first_step`."""
    return {
        "type": LR_TYPE,
        "first_step": int(first_step),
        "learning_rate": float(phase.peak),
        **{k: v for k, v in phase.to_dict().items()},
    }


def register() -> None:
    global _registered
    if _registered:
        return
    import mindspore.common.dtype as mstype
    from mindspore import Tensor, ops
    from mindspore.nn.learning_rate_schedule import LearningRateSchedule
    from mindformers.tools.register import MindFormerModuleType, MindFormerRegister

    class PretrainPhaseLR(LearningRateSchedule):
        """schedule.lr_at(phase, global_step - first_step) in float32, graph-compilable."""

        def __init__(
            self,
            name: str,
            steps: int,
            start: float,
            peak: float,
            end: float,
            warmup_steps: int,
            schedule: str,
            first_step: int = 0,
            wsd_decay_fraction: float = 0.2,
            **kwargs,
        ):
            super().__init__()
            self.kind = str(schedule)
            self.first_step = float(first_step)
            self.last = float(max(int(steps) - 1, 0))
            w = int(warmup_steps)
            span = max(int(steps) - w, 1)
            self.warmup = float(w)
            self.span = float(span)
            self.decay = float(max(1, int(round(float(wsd_decay_fraction) * span))))
            self.start, self.peak, self.end = float(start), float(peak), float(end)
            self.pi = math.pi
            self.zero = Tensor(0.0, mstype.float32)

        def construct(self, global_step):
            i = ops.clamp(ops.cast(global_step, mstype.float32) - self.first_step, 0.0, self.last)
            warm = self.start + (self.peak - self.start) * (i + 1.0) / max(self.warmup, 1.0)
            t = (i - self.warmup + 1.0) / self.span
            if self.kind == "constant":
                decayed = self.zero + self.peak
            elif self.kind == "cosine":
                decayed = self.end + (self.peak - self.end) * 0.5 * (1.0 + ops.cos(self.pi * t))
            elif self.kind == "linear":
                decayed = self.peak + (self.end - self.peak) * t
            else:  # wsd: stable, then linear over the last `decay` steps
                into = (i - self.warmup + 1.0) - (self.span - self.decay)
                decayed = ops.select(
                    into > 0.0, self.peak + (self.end - self.peak) * into / self.decay, self.zero + self.peak
                )
            return ops.select(i < self.warmup, warm, decayed)

    MindFormerRegister.register_cls(PretrainPhaseLR, MindFormerModuleType.LR, alias=LR_TYPE)
    _registered = True
