"""MoE expert load of a training step, for the step's metrics, and the router's token groups.

The CPU experts (`CPUDenseExperts`, pretrain/model/cpu_compat.py) add the tokens routed to each
expert into their `expert_tokens` buffer on every forward; `ExpertLoad` zeroes the buffers before a
step and reads them after it (every micro-batch of the step, summed over the data-parallel ranks),
giving per MoE layer the tokens per expert and, for the metrics, the worst layer's
max ÷ mean (1.0 = perfectly balanced; top_k = experts: everything on one expert) and the dropped
tokens. MindFormers 1.9.0's MoE training path is dropless (no expert capacity:
moe_expert_capacity_factor unset), so nothing is dropped: the metric says 0 rather than being absent.
On Ascend MindFormers' grouped-GEMM experts keep no such buffer and the metrics have no expert load.
"""

from typing import Any, Dict, List

import numpy as np

# lazy imports (mindspore): by design, its 3-10 s import stays out of planning and dry runs


def localize_routers(net: Any) -> int:
    """Our loop runs data parallel as MindSpore's DATA_PARALLEL mode: each rank's graph sees its own
    micro-batch, but MindFormers' router splits the tokens it sees into data_parallel·tp·cp groups
    (under its semi-auto parallel the tensor is the global batch, so a group is one rank's tokens)
    and averages the load-balancing loss over the groups. Here the rank's tokens are already one
    group: set each router's group count to 1 so that, as under semi-auto, the balance loss is
    that of each rank's micro-batch (and dp2 equals one process with grad_accum 2). Returns the
    number of routers changed."""
    changed = 0
    for _, cell in net.cells_and_names():
        if type(cell).__name__ == "TopKRouter" and cell.dp != 1:
            if cell.moe_router_load_balancing_type != "sub_seq_aux_loss":
                continue   # seq/gbs variants size tensors by dp at build time; left as MindFormers built them
            cell.dp = 1
            changed += 1
    return changed


class ExpertLoad:
    def __init__(self, net: Any, data_parallel: int = 1):
        self.buffers: List[Any] = [cell.expert_tokens for _, cell in net.cells_and_names()
                                   if hasattr(cell, "expert_tokens")]
        self.data_parallel = int(data_parallel)

    def __bool__(self) -> bool:
        return bool(self.buffers)

    def reset(self) -> None:
        import mindspore as ms

        for buf in self.buffers:   # in place: the compiled graph keeps the buffer it was built with
            buf.copy_(ms.Tensor(np.zeros(buf.shape, np.float32)))

    def tokens_per_expert(self) -> List[List[float]]:
        """Per MoE layer, the tokens routed to each expert in this step, over all ranks."""

        counts = np.stack([buf.asnumpy() for buf in self.buffers]) if self.buffers else np.zeros((0, 0))
        if self.data_parallel > 1 and self.buffers:
            import mindspore as ms
            from mindspore import ops

            counts = ops.AllReduce()(ms.Tensor(counts.astype(np.float32))).asnumpy()
        return counts.tolist()

    def metrics(self) -> Dict[str, float]:
        layers = self.tokens_per_expert()
        ratios = [max(c) / (sum(c) / len(c)) for c in layers if sum(c) > 0]
        return {"expert_load_max_over_mean": max(ratios) if ratios else 0.0, "expert_tokens_dropped": 0.0}
