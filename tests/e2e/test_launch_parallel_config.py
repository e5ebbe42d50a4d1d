"""The parallel settings exported to mindformers.yaml, loaded and applied by MindFormers' and
MindSpore's own code the way MindFormers' run script does (validators, ParallelOperator,
set_auto_parallel_context, build_parallel_config, the Mcore config converter, LayerSetting,
the dataset shard rule), and checked against the planner. Nothing here needs Ascend devices."""

import pytest

from pretrain.config import validate
from pretrain.config.layout import ParallelLayout
from pretrain.config.resolved import ResolvedRun
from pretrain.config.validate import num_devices
from pretrain.model import mindformers_config as mfc
from pretrain.plan.formulas import bubble_fraction
from pretrain.plan.planner import plan
from tests.helpers.mindformers_load import load_as_mindformers_does

BIG = ["model=llama3_70b", "hardware=ascend910b_8x8"]


@pytest.fixture
def applied(mindformers, tmp_path):
    """export -> mindformers.yaml -> what MindFormers makes of it, for a composed config."""
    import mindspore as ms

    def apply(cfg):
        phase = cfg.phase.general if "general" in cfg.phase else cfg.phase
        path = tmp_path / "mindformers.yaml"
        path.write_text(mfc.to_yaml(mfc.export(cfg, first_phase=phase, first_phase_steps=100,
                                               first_phase_peak=float(cfg.train.lr_peak))))
        return load_as_mindformers_does(path, num_devices(cfg.hardware))

    yield apply
    ms.reset_auto_parallel_context()


@pytest.mark.parametrize("layout, overrides", [
    ("dp8tp4pp2", []),
    ("dp1tp8pp8", []),
    ("dp1tp8pp8", ["parallel.pipeline_layers=[9,10,10,10,10,10,10,11]", "parallel.zero_stage=0"]),
    ("dp2tp4pp8vpp2", ["parallel.zero_stage=2"]),
    ("dp8tp4pp2", ["parallel.zero_stage=3", "parallel.recompute=full", "parallel.sequence_parallel=false"]),
])
def test_70b_layouts_load_through_mindformers_and_agree_with_the_planner(layout, overrides, applied, compose_many):
    import mindspore as ms

    cfg = compose_many([*BIG, f"parallel={layout}", *overrides])
    p = cfg.parallel
    config, t, layer_list = applied(cfg)

    # MindSpore's auto-parallel context, as set by MindFormers from the `parallel` block
    get = ms.get_auto_parallel_context
    assert get("parallel_mode") == "semi_auto_parallel" and get("device_num") == 64
    assert get("pipeline_stages") == p.pp and get("full_batch") is False
    assert [list(s) for s in get("dataset_strategy")] == [[p.dp, 1]] * len(mfc.input_columns(cfg))   # + position_ids, actual_seq_len
    sharded = p.zero_stage >= 1 and p.dp > 1
    assert get("enable_parallel_optimizer") is sharded
    if sharded:
        assert config.parallel.parallel_optimizer_config.optimizer_level == f"level{p.zero_stage}"
        from mindspore.parallel._auto_parallel_context import auto_parallel_context
        assert auto_parallel_context().get_grad_accumulation_shard() is (p.zero_stage == 2)   # ZeRO-2: grads too
    assert get("pipeline_interleave") is (p.vpp > 1)

    # parallel_config -> the Mcore TransformerConfig the model is built from
    assert (t.data_parallel_size, t.tensor_model_parallel_size, t.pipeline_model_parallel_size) == (p.dp, p.tp, p.pp)
    assert t.data_parallel_size * t.tensor_model_parallel_size * t.pipeline_model_parallel_size \
        * t.context_parallel_size == num_devices(cfg.hardware)
    assert (t.virtual_pipeline_model_parallel_size or 1) == p.vpp
    assert t.sequence_parallel is p.sequence_parallel
    assert t.recompute is (p.recompute == "full") and t.select_recompute is (p.recompute == "selective")
    assert config.parallel_config.micro_batch_num == t.micro_batch_num

    # ... and the planner agrees with MindFormers' numbers
    planned = plan(ResolvedRun.of(cfg))
    lay = planned.layout
    assert (lay.dp, lay.tp, lay.pp, lay.vpp, lay.world_size) == (p.dp, p.tp, p.pp, p.vpp, 64)
    assert lay.grad_accum == t.micro_batch_num == cfg.train.grad_accum
    # MindFormers' global batch with a pipeline: batch_size x dp x micro_batch_num
    assert config.runner_config.batch_size * p.dp * t.micro_batch_num == cfg.train.global_batch_size
    assert config.runner_config.gradient_accumulation_steps == 1
    per_rank = layer_list.sum(axis=0)             # a pipeline rank runs its virtual stages' layers
    assert per_rank.sum() == cfg.model.num_layers == t.num_layers
    assert (planned.memory_first.layers, planned.memory_last.layers) == (per_rank[0], per_rank[-1])
    if p.pipeline_layers is not None:
        assert layer_list.reshape(-1).tolist() == list(p.pipeline_layers)
    assert planned.bubble == pytest.approx(bubble_fraction(p.pp, t.micro_batch_num, p.vpp))


@pytest.mark.parametrize("layout, zero", [("dp8tp4pp2", 1), ("dp8tp4pp2", 3), ("dp1tp8pp8", 0)])
def test_checkpoint_plan_is_the_per_rank_shard_mindformers_writes(layout, zero, applied, compose_many):
    """The planned checkpoint per device = the parameters MindFormers gives the rank's stage (its own
    parallel config and layer split) in fp32 + Adam m, v, sharded by ZeRO as optimizer parallel shards."""
    cfg = compose_many([*BIG, f"parallel={layout}", f"parallel.zero_stage={zero}"])
    _, t, layer_list = applied(cfg)
    m = cfg.model
    hd = m.hidden_size // m.num_heads
    layer = 2 * m.hidden_size * m.num_heads * hd + 2 * m.hidden_size * m.num_kv_heads * hd \
        + 3 * m.hidden_size * m.ffn_hidden_size + 2 * m.hidden_size
    first = (int(layer_list.sum(axis=0)[0]) * layer + m.vocab_size * m.hidden_size) / t.tensor_model_parallel_size
    group = t.data_parallel_size
    shard = 4 * first / (group if zero >= 3 else 1) + 8 * first / (group if zero >= 1 else 1)
    planned = plan(ResolvedRun.of(cfg))
    if planned.peak_stage == "last":   # the head and final norm instead of the embedding
        last = (int(layer_list.sum(axis=0)[-1]) * layer + m.vocab_size * m.hidden_size + m.hidden_size)
        first = last / t.tensor_model_parallel_size
    shard = 4 * first / (group if zero >= 3 else 1) + 8 * first / (group if zero >= 1 else 1)
    assert planned.checkpoint.gb_per_device == pytest.approx(shard / 1e9, rel=1e-6)


@pytest.mark.parametrize("layout", ["dp8tp4pp2", "dp1tp8pp8", "dp2tp4pp8vpp2"])
def test_each_rank_reads_the_data_shard_mindformers_assigns_it(layout, applied, compose_many, monkeypatch):
    """ranks.data_parallel_rank (our loader's shard) == MindFormers' dataset shard rule for every rank."""
    from mindformers.dataset import base_dataset

    from pretrain.train import ranks

    cfg = compose_many([*BIG, f"parallel={layout}"])
    applied(cfg)
    world = num_devices(cfg.hardware)
    monkeypatch.setattr(base_dataset, "get_real_group_size", lambda: world)
    monkeypatch.setenv("RANK_SIZE", str(world))
    seen = []
    for rank in range(world):
        monkeypatch.setattr(base_dataset, "get_real_rank", lambda r=rank: r)
        monkeypatch.setenv("RANK_ID", str(rank))
        shard, shards = base_dataset.BaseDataset._generate_shard_info()
        assert ranks.data_parallel_rank(ParallelLayout.from_config(cfg)) == (shard, shards)
        seen.append(shard)
    assert sorted(set(seen)) == list(range(cfg.parallel.dp))
    assert all(seen.count(s) == world // cfg.parallel.dp for s in set(seen))   # tp·pp·cp ranks per shard


def test_dp2_on_cpu_is_mindspore_data_parallel_with_averaged_gradients(applied, compose_many):
    import mindspore as ms

    cfg = compose_many(["parallel=dp2", "hardware=cpu_2proc"])
    blocks = mfc.parallel_blocks(cfg)
    assert blocks["use_parallel"] is True
    config, t, _ = applied(cfg)
    assert ms.get_auto_parallel_context("parallel_mode") == "data_parallel"
    assert ms.get_auto_parallel_context("gradients_mean") is True
    assert ms.get_auto_parallel_context("device_num") == 2
    assert t.data_parallel_size == 2 and t.tensor_model_parallel_size == 1
    # the Mcore model under a data-parallel context needs lazy inline off on CPU
    assert config.model.model_config.disable_lazy_inline is True and t.disable_lazy_inline is True
    assert mfc.parallel_blocks(compose_many([]))["use_parallel"] is False


def test_zero_bubble_is_mindsporess_zbv_with_two_virtual_stages(applied, compose_many):
    import mindspore as ms

    good = compose_many([*BIG, "parallel=dp2tp4pp8vpp2", "parallel.pipeline_schedule=zero_bubble"])
    applied(good)   # TransformerConfig checks ZB-V's own rules (vpp 2, micro-batches >= 2·pp)
    assert ms.get_auto_parallel_context("pipeline_scheduler") == "zero_bubble_v"
    # the planner plans the schedule MindSpore runs: ZB-V, no bubble, 1F1B's activation memory (L layers'
    # worth on every rank) rather than the interleaved schedule's L(1 + (p-1)/(p*v))
    interleaved = compose_many([*BIG, "parallel=dp2tp4pp8vpp2"])
    zbv, interleaved = plan(ResolvedRun.of(good)), plan(ResolvedRun.of(interleaved))
    assert zbv.bubble == 0.0 < interleaved.bubble
    assert zbv.memory_first.activations_gb < interleaved.memory_first.activations_gb
    assert zbv.memory_first.activations_gb == pytest.approx(zbv.memory_last.activations_gb)
    few = compose_many([*BIG, "parallel=dp2tp4pp8vpp2", "parallel.pipeline_schedule=zero_bubble",
                        "train.global_batch_size=16"])
    assert any("2 * parallel.pp(8)" in line for line in validate.problems(few))
    bad = compose_many([*BIG, "parallel=dp8tp4pp2", "parallel.pipeline_schedule=zero_bubble"])
    assert any("set parallel.vpp=2" in line for line in validate.problems(bad))


def test_70b_dry_run_writes_per_phase_yamls_that_pass_mindformers_checks_on_64_devices(mindformers, cli, tmp_path,
                                                                                       monkeypatch):
    """The issue's must-show: engine mindformers, one yaml per phase, each loaded with MindFormerConfig and
    passing MindFormers' own checks (validators, parallel context, parallel config, check_rules) on 64 devices."""
    import mindspore as ms
    from mindformers.tools import check_rules

    proc = cli(*BIG, "parallel=dp8tp4pp2", "dry_run=true", "run_dir=run")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "engine     mindformers" in proc.stdout
    assert "engine mindformers: MindFormers yamls mindformers_general.yaml, mindformers_reasoning.yaml, " \
           "mindformers_anneal.yaml" in proc.stdout
    monkeypatch.setattr(check_rules, "get_real_group_size", lambda: 64)
    try:
        for phase in ("general", "reasoning", "anneal"):
            config, t, _ = load_as_mindformers_does(tmp_path / "run" / f"mindformers_{phase}.yaml", 64)
            # check_rules(config, mode="train") less its eval-metric part (_check_mode), which reads the
            # metric list MindFormers' Trainer builds from its task defaults
            check_rules._check_full_batch()
            check_rules._check_parallel(config)              # dp*tp*cp*pp == device_num, pp vs layers, ...
            check_rules._check_recompute(config)
            check_rules._check_config_campacity(config)
            check_rules._check_swap(config)
            assert ms.get_auto_parallel_context("device_num") == 64 and ms.get_auto_parallel_context(
                "pipeline_stages") == 2
            assert (t.data_parallel_size, t.tensor_model_parallel_size, t.pipeline_model_parallel_size) == (8, 4, 2)
            assert config.lr_schedule.type == "PretrainPhaseLR" and config.auto_trans_ckpt is True
            assert config.train_dataset.data_loader.phase == phase
    finally:
        ms.reset_auto_parallel_context()
