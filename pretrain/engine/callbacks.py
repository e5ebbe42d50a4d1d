"""`PretrainLossLog`: a MindFormers callback that appends each step's loss, learning rate, global
norm and overflow flag to run_dir/mindformers/<phase>/losses.jsonl (the curve our tests and the
run summary read; MindFormers' own MFLossMonitor only prints them)."""

import json
import time
from pathlib import Path
from typing import Any, Dict, List

from pretrain.engine.phases import output_dir
from pretrain.train import ranks

# lazy imports (mindspore, mindformers): by design, their 3-10 s import stays out of planning and dry runs

CALLBACK_TYPE = "PretrainLossLog"
_registered = False


def log_path(run_dir: Path, phase: str) -> Path:

    return output_dir(run_dir, phase) / "losses.jsonl"


def read_log(run_dir: Path, phase: str) -> List[Dict[str, Any]]:
    path = log_path(run_dir, phase)
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def register() -> None:
    global _registered
    if _registered:
        return
    from mindspore.train.callback import Callback
    from mindformers.core.callback.callback import _get_loss_output
    from mindformers.tools.register import MindFormerModuleType, MindFormerRegister

    class PretrainLossLog(Callback):
        def __init__(self, path: str, first_step: int = 0, **kwargs: Any):
            super().__init__()
            self.path, self.first_step = Path(path), int(first_step)
            self.path.parent.mkdir(parents=True, exist_ok=True)

        def on_train_step_end(self, run_context: Any) -> None:

            if not ranks.writes_run_files():
                return
            cb = run_context.original_args()
            loss, overflow, _, lr, norm = _get_loss_output(cb.net_outputs)
            row = {
                "step": self.first_step + int(cb.cur_step_num),
                "loss": float(loss),
                "lr": None if lr is None else float(lr),
                "grad_norm": None if norm is None else float(norm),
                "overflow": bool(overflow),
                "time": time.time(),
            }
            with open(self.path, "a") as fh:
                fh.write(json.dumps(row) + "\n")

    MindFormerRegister.register_cls(PretrainLossLog, MindFormerModuleType.CALLBACK, alias=CALLBACK_TYPE)
    _registered = True
