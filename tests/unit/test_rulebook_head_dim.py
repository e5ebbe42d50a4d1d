"""Issue 27: following the rulebook's advice ("set model.head_dim explicitly" for hidden_size=258 with
4 heads) passed the dry run, then the real run crashed in MindFormers with a ValueError traceback:
MindFormers 1.9.0's attention (parallel_core/training_graph/transformer/attention.py) requires
hidden_size % num_heads == 0 whatever kv_channels is. Now that layout is "plan only", in one line."""
from pretrain.config import validate
from pretrain.config.resolved import ResolvedRun
from pretrain.plan.planner import plan
from pretrain.plan.verdict import verdict


def test_head_dim_does_not_make_an_indivisible_hidden_size_trainable_here(compose_many):
    bare = validate.problems(compose_many(["model.hidden_size=258"]))
    assert len(bare) == 1 and "make hidden_size a multiple of num_heads, or set model.head_dim" in bare[0]
    assert "planned only" in bare[0]
    cfg = compose_many(["model.hidden_size=258", "model.head_dim=64"])
    assert validate.problems(cfg) == []                  # sound: planned like any model
    run = ResolvedRun.of(cfg)
    status, refused = verdict(run.with_plan(plan(run)))
    assert status == "plan only" and len(refused) == 1
    assert refused[0].startswith("model.hidden_size(258) % model.num_heads(4) != 0 (model.head_dim=64): "
                                 "MindFormers 1.9.0's attention")
    assert validate.training_problems(compose_many(["model.hidden_size=256", "model.head_dim=64"])) == []
