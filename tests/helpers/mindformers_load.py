"""A mindformers yaml loaded the way MindFormers' run script loads it (MindFormers imported inside, as
every test that needs it does): the parallel-config and model-sandwich tests check what it makes."""


def load_as_mindformers_does(path, world):
    """A mindformers yaml -> what MindFormers' run script makes of it on `world` devices: its
    validators, ParallelOperator's auto-parallel context, the TransformerOpParallelConfig, the Mcore
    TransformerConfig and the per-stage layer split."""
    from mindformers.core.context.parallel import ParallelOperator
    from mindformers.core.context.validators import execute_validator
    from mindformers.core.parallel_config import build_parallel_config
    from mindformers.models.build_config import get_model_config
    from mindformers.modules.transformer.transformer import TransformerOpParallelConfig
    from mindformers.parallel_core.training_graph.transformer.utils import LayerSetting
    from mindformers.tools.register import MindFormerConfig

    config = MindFormerConfig(str(path))
    execute_validator(config)                       # what build_context runs first
    operator = ParallelOperator(config)             # sets parallel.pipeline_stages from parallel_config
    # ParallelOperator.init_communication() after init(): device_num = the group size
    ParallelOperator._set_ms_auto_parallel_context(**operator.parallel_ctx, device_num=world)
    build_parallel_config(config)                   # dict -> TransformerOpParallelConfig (validated)
    assert isinstance(config.parallel_config, TransformerOpParallelConfig)
    config.model.model_config.parallel_config = config.parallel_config   # as MindFormers' trainer does
    transformer = get_model_config(config.model).convert_to_transformer_config()
    layers = LayerSetting(transformer.num_layers, transformer.offset, transformer,
                          transformer.virtual_pipeline_model_parallel_size or 1)
    return config, transformer, layers.layer_list
