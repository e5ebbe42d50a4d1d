"""Build the MindFormers Mcore training model for a composed config.

The model is whatever MindFormers' own `build_network` makes of the `model.model_config` block in
mindformers_config.py, the same block run_dir/mindformers.yaml carries. On CPU the replacements
in cpu_compat.py go in first; on Ascend nothing is replaced.
"""

import contextlib
import logging
import os
import sys
from pathlib import Path
from typing import Any, Dict, Optional

from omegaconf import DictConfig

from pretrain.config import validate
from pretrain.model import cpu_compat, mindformers_config, moe_load, sandwich

# lazy imports (mindformers): by design, its 3-10 s import stays out of planning and dry runs


def prepare_environment(run_dir: Optional[str] = None) -> None:
    """Before mindformers is imported: its log directory goes under the run dir instead of ./output,
    and MindSpore's C++ logging keeps to errors unless the user chose a level."""
    os.environ.setdefault("GLOG_v", "3")
    if run_dir is not None:   # a run's MindFormers logs belong to that run, whatever the environment says
        os.environ["LOCAL_DEFAULT_PATH"] = str(Path(run_dir).resolve() / "mindformers_output")


def import_mindformers_quietly() -> None:
    """Import MindFormers with its console logging kept to errors. On import it warns about optional
    packages it lacks (hyper_parallel) through a logger whose console handler it creates then, on the
    sys.stdout of that moment, and building a model logs every converted config field (INFO) and
    tables of ignored Hugging Face keys (WARNING). So the import writes into
    run_dir/mindformers_output/import.log, and afterwards the console handler goes back to the real
    stdout at ERROR; the full log stays in run_dir/mindformers_output/log/."""

    console = sys.__stdout__   # not a sweep job's redirected stdout, which closes with the job
    log_dir = os.environ.get("LOCAL_DEFAULT_PATH")   # the run dir's (prepare_environment); else nowhere
    if log_dir:
        Path(log_dir).mkdir(parents=True, exist_ok=True)
    with open(Path(log_dir) / "import.log" if log_dir else os.devnull, "a", encoding="utf-8") as log, \
            contextlib.redirect_stdout(log):
        from mindformers.tools.logger import LimitedRepeatHandler, get_logger

        # Only MindFormers' own console handler: others on its logger are not ours to move (pytest 9
        # attaches its LogCaptureHandler, whose StringIO it reads back, to non-propagating loggers too).
        for handler in get_logger().handlers:   # back on the console (before `log` closes), errors only
            if isinstance(handler, LimitedRepeatHandler):   # its console class (its files: another class)
                handler.stream = console   # (setStream would flush the old stream, maybe closed by now)
                handler.setLevel(logging.ERROR)


def init_runtime(cfg: DictConfig) -> None:
    """MindFormers' context for this process (device, GRAPH mode, the Mcore code paths of
    use_legacy=False) and, on CPU, the replacements. For a layout of several devices (one rank of
    an msrun launch) it is MindFormers' parallel context from the exported blocks: it init()s the
    communication and sets MindSpore's auto-parallel context (DATA_PARALLEL, device_num = world)."""
    import_mindformers_quietly()
    from mindformers.core.context.build_context import build_context

    blocks = mindformers_config.parallel_blocks(cfg)
    parallel = blocks["use_parallel"]
    build_context(
        {
            "use_legacy": False,
            "use_parallel": parallel,
            "context": mindformers_config.context_block(cfg),
            "parallel": blocks["parallel"] if parallel else {},
            "parallel_config": blocks["parallel_config"] if parallel else {},
        }
    )
    if cfg.hardware.device == "cpu":

        cpu_compat.apply()


def build_model(cfg: DictConfig, pad_token_id: int = 0) -> Any:
    """The registered MindFormers Mcore training model for cfg.model, in training mode."""
    validate.check_trainable(cfg)
    init_runtime(cfg)
    block = mindformers_config.model_config(cfg, pad_token_id=pad_token_id)
    net = build_from_block(block, parallel_default_args(cfg))
    if not mindformers_config.is_semi_auto(cfg):   # our loop's data parallel: each rank sees its own tokens

        moe_load.localize_routers(net)
    net.set_train(True)
    return net


def parallel_default_args(cfg: DictConfig) -> Optional[Dict[str, Any]]:
    """What MindFormers' trainer hands build_network for a parallel layout: the parallel_config
    (with its recompute_config) as the TransformerOpParallelConfig that build_parallel_config makes
    of the exported blocks. None for one device: the model's defaults are that layout."""
    blocks = mindformers_config.parallel_blocks(cfg)
    if not blocks["use_parallel"]:
        return None
    from mindformers.core.parallel_config import build_parallel_config
    from mindformers.tools.register import MindFormerConfig

    config = MindFormerConfig(
        use_legacy=False, parallel_config=blocks["parallel_config"], recompute_config=blocks["recompute_config"]
    )
    build_parallel_config(config)
    return {"parallel_config": config.parallel_config}


def build_from_block(block: Dict[str, Any], default_args: Optional[Dict[str, Any]] = None) -> Any:
    from mindformers.models.build_model import build_network
    from mindformers.tools.register import MindFormerConfig


    sandwich.register()   # the block may name our DSSN class (mindformers_config.model_class)

    # The config converter prints a table of every converted key; keep it in the log dir, off stdout.
    log_dir = Path(os.environ.get("LOCAL_DEFAULT_PATH", "./output"))
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / "build_network.log", "a", encoding="utf-8") as log, contextlib.redirect_stdout(log):
        return build_network(MindFormerConfig(model={"model_config": dict(block)}).model, default_args=default_args)
