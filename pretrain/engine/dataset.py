"""Our MindRecord shards as a MindFormers dataset loader, so MindFormers' trainer trains on exactly
the batches our loop would: `PretrainShardLoader`, registered in MindFormers' DATASET_LOADER
registry and named by the exported yaml's train_dataset.data_loader.type.

MindFormers' CausalLanguageModelDataset hands a non-MindDataset loader its data-parallel shard
(shard_id, num_shards: the same rule as pretrain.train.ranks.data_parallel_rank, which
tests/test_launch_parallel_config.py checks) and batches what it yields by micro_batch_size. The
loader yields one packed row per sample, in the order our BatchLoader assigns them: sample k of
this rank is row k mod B of our batch(k div B), B = micro_batch_size x grad_accum, so MindFormers'
micro-batches (and gradient-accumulation / pipeline micro-batches) of optimizer step s are our
batch(s) split in order. It is random access, so MindFormers' data skip on resume
(dataset.set_init_step) lands on the same sample our loop would resume at.
"""

from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np
from omegaconf import OmegaConf

from pretrain.config.errors import PretrainConfigError
from pretrain.config.resolved import ResolvedRun
from pretrain.data.prepare import prepare
from pretrain.model.mindformers_config import document_attention, input_columns
from pretrain.train.build import make_loader
from pretrain.train.inputs import model_arrays

# lazy imports (mindspore, mindformers): by design, their 3-10 s import stays out of planning and dry runs

LOADER_TYPE = "PretrainShardLoader"
_registered = False


class PhaseSamples:
    """Random-access samples of one phase for one data-parallel rank: (input_ids, labels, loss_mask)."""

    def __init__(self, run_dir: str, phase: str, shard_id: int, num_shards: int) -> None:


        run = ResolvedRun.of(OmegaConf.load(Path(run_dir) / "config.yaml"))
        cfg, ph = run.cfg, run.phase(phase)
        if ph is None:

            raise PretrainConfigError(
                f"phase {phase!r} is not a phase of the run in {run_dir} ({', '.join(run.phase_names)})"
            )

        prepared = prepare(cfg.data, progress=False)  # ready in the cache: only reads the manifests
        self.loader = make_loader(run, prepared, ph, "train", int(shard_id), int(num_shards))
        self.per_step = self.loader.batch_size
        self.samples = ph.steps * self.per_step
        self.mode, self.columns = document_attention(cfg), input_columns(cfg)
        self._step, self._arrays = -1, None

    def __len__(self) -> int:
        return self.samples

    def __getitem__(self, k: int) -> Tuple[np.ndarray, ...]:
        """Row k's model inputs, the columns of input_columns(cfg) in order (with the document
        attention of data.document_mask, as our loop feeds them: pretrain/train/inputs.py)."""

        step, j = divmod(int(k), self.per_step)
        if step != self._step:
            self._arrays, self._step = model_arrays(self.loader.batch(step), self.mode), step
            if "actual_seq_len" in self._arrays:   # row-local ends: MindFormers batches one row per
                seq = self._arrays["input_ids"].shape[1]   # micro-batch here (validate.py)
                self._arrays["actual_seq_len"] -= (np.arange(self.per_step, dtype=np.int32) * seq)[:, None]
        return tuple(self._arrays[c][j] for c in self.columns)


def build(
    run_dir: str,
    phase: str,
    column_names: List[str],
    shard_id: int = 0,
    num_shards: int = 1,
    **unused: Dict[str, Any],
) -> Any:
    """The MindSpore dataset MindFormers batches (kwargs from the yaml's data_loader block plus
    MindFormers' own: shard_id, num_shards, column_names, batch_size, ...)."""
    import mindspore.dataset as ds

    source = PhaseSamples(run_dir, phase, shard_id or 0, num_shards or 1)
    names = list(column_names)
    if names != source.columns:

        raise PretrainConfigError(
            f"train_dataset.input_columns={names}: {LOADER_TYPE} yields {', '.join(source.columns)} for "
            f"this run's data.document_mask and hardware"
        )
    # the shard is chosen by our loader already: the dataset itself is not sharded again
    return ds.GeneratorDataset(
        source, column_names=names, shuffle=False, num_parallel_workers=1, python_multiprocessing=False
    )


def register() -> None:
    global _registered
    if _registered:
        return
    from mindformers.tools.register import MindFormerModuleType, MindFormerRegister

    class PretrainShardLoader:
        """Registered factory: MindFormers instantiates it with the data_loader kwargs."""

        def __new__(
            cls,
            run_dir: str,
            phase: str,
            column_names: List[str],
            shard_id: int = 0,
            num_shards: int = 1,
            **kwargs: Any,
        ) -> Any:
            return build(run_dir, phase, column_names, shard_id, num_shards, **kwargs)

    MindFormerRegister.register_cls(
        PretrainShardLoader, MindFormerModuleType.DATASET_LOADER, alias=LOADER_TYPE
    )
    _registered = True
