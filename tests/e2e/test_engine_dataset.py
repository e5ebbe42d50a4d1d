"""Dataset parity: MindFormers' own dataset builder, given the exported yaml's train_dataset, yields
for every optimizer step the tokens, labels and loss mask our loader (BatchLoader.batch) gives our
loop, from our MindRecord shards as written (input_ids + seg_lens), on every data-parallel rank and
with gradient accumulation."""

import numpy as np
import pytest
from omegaconf import OmegaConf

from pretrain.config.resolved import ResolvedRun
from pretrain.engine import phases as engine_phases
from pretrain.model import mindformers_config as mfc
from tests.helpers.models import SMALL_MODEL

pytestmark = pytest.mark.slow  # prepares the sample corpus once per session (~1 min)

SMALL = [
    *SMALL_MODEL,
]


@pytest.mark.parametrize("layout", [[], ["parallel.micro_batch_size=2"]])  # grad_accum 1, 4
def test_mindformers_dataset_builder_yields_our_loaders_batches(
    mindformers, compose_many, data_cache, tmp_path, monkeypatch, layout
):
    from mindformers.dataset import base_dataset
    from mindformers.dataset.build_dataset import build_dataset
    from mindformers.tools.register import MindFormerConfig

    from pretrain.data.prepare import prepare
    from pretrain.engine.dataset import register
    from pretrain.train.inputs import model_arrays
    from pretrain.train.build import make_loader

    register()
    cfg = compose_many(
        [*SMALL, *layout, "phase=reasoning", f"data.cache_dir={data_cache}", f"run_dir={tmp_path}"]
    )
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))  # the frozen run dir
    prepared = prepare(cfg.data, progress=False)
    run = ResolvedRun.of(cfg)
    (path,) = engine_phases.write_phases(run)
    config = MindFormerConfig(str(path))
    # with data.document_mask (the default) on CPU: + position_ids and the block-diagonal attention_mask
    assert config.train_dataset.input_columns == mfc.input_columns(cfg) == [*mfc.INPUT_COLUMNS, "position_ids",
                                                                              "attention_mask"]
    micro, accum = int(cfg.parallel.micro_batch_size), int(cfg.train.grad_accum)
    for rank, world in ((0, 1), (1, 2)):  # MindFormers' data-parallel shard = our dp rank
        monkeypatch.setattr(base_dataset, "get_real_group_size", lambda w=world: w)
        monkeypatch.setattr(base_dataset, "get_real_rank", lambda r=rank: r)
        monkeypatch.setenv("RANK_SIZE", str(world))
        monkeypatch.setenv("RANK_ID", str(rank))
        monkeypatch.setattr(base_dataset.BaseDataset, "_is_data_parallel", classmethod(lambda cls: world > 1))
        built = build_dataset(config.train_dataset_task)
        ours = make_loader(run, prepared, run.phases[0], "train", rank, world)
        batches = built.create_dict_iterator(output_numpy=True, num_epochs=1)
        for step in range(4):
            want = model_arrays(ours.batch(step), mfc.document_attention(cfg))   # what our loop feeds
            got = [next(batches) for _ in range(accum)]
            for key in mfc.input_columns(cfg):
                joined = np.concatenate([b[key] for b in got])
                assert len(joined) == micro * accum
                np.testing.assert_array_equal(joined, want[key], err_msg=f"{key} step {step} rank {rank}")
        assert got[0]["input_ids"].dtype == np.int32 and got[0]["labels"].dtype == np.int32
        steps = engine_phases.export_phases(run)["reasoning"]["pretrain_phase"]["steps"]
        assert built.get_dataset_size() == steps * accum  # one pass = the phase's steps
