"""Issue 14 without a model: the restart budget, the shrink arithmetic, the dp-change resume rule
and the launcher's port choice (the end-to-end behaviour is in test_elastic_e2e.py, slow)."""
import socket

import pytest
from omegaconf import OmegaConf

from pretrain.config.errors import PretrainRunError
from pretrain.launch import msrun
from pretrain.launch.supervise import RestartBudget, shrunk_dp, with_dp
from pretrain.config import resilience
from pretrain.resilience.resume import resume_changes


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_the_budget_allows_max_restarts_within_the_window_and_forgets_older_ones():
    clock = Clock()
    budget = RestartBudget(2, 100.0, clock)
    assert budget.allows() and budget.spend(1) == 1
    clock.t = 50
    assert budget.allows() and budget.spend(1) == 2
    assert not budget.allows()                  # a third restart within 100 s: spent
    clock.t = 120                               # the first one left the window
    assert budget.allows()
    assert not RestartBudget(0, 100.0, clock).allows()   # 0: never restart, as before


def test_the_rank_left_out_is_the_one_that_kept_failing():
    budget = RestartBudget(3, 100.0, Clock())
    for rank in (1, 0, 1):
        budget.spend(rank)
    assert budget.worst_rank(latest=0) == 0     # 1 failed twice, 0 twice with this one: tie -> latest
    budget.spend(1)
    assert budget.worst_rank(latest=0) == 1


def cfg(dp=4, tp=1, gbs=8, micro=1, min_devices=1):
    return OmegaConf.create({
        "parallel": {"dp": dp, "tp": tp, "pp": 1, "cp": 1, "ep": 1, "vpp": 1, "zero_stage": 0, "micro_batch_size": micro},
        "train": {"global_batch_size": gbs, "grad_accum": gbs // (micro * dp)},
        "hardware": {"devices_per_node": dp * tp, "num_nodes": 1, "min_devices": min_devices}})


@pytest.mark.parametrize("kw, left, want", [
    ({}, 3, 2),                                   # 3 devices left: dp 3 does not divide batch 8 -> 2
    ({"gbs": 12}, 3, 3),
    ({"tp": 2, "gbs": 8}, 7, 2),                  # replicas of 2 devices: 7 left hold 3, 8 % 3 -> 2
    ({"min_devices": 3}, 3, None),                # dp 2 would fall below hardware.min_devices
    ({"dp": 2, "micro": 4}, 1, 1),
    ({"dp": 2, "micro": 3, "gbs": 6}, 1, 1),
])
def test_the_job_shrinks_to_the_largest_valid_data_parallel_size(kw, left, want):
    assert shrunk_dp(cfg(**kw), left) == want


def test_a_shrunk_layout_keeps_the_global_batch():
    out = with_dp(cfg(dp=2, micro=4), 1)
    assert out.parallel.dp == 1 and out.hardware.devices_per_node == 1
    assert out.train.grad_accum * out.parallel.micro_batch_size * out.parallel.dp == 8


SAVED = {"parallel": {"name": "dp2", "dp": 2, "tp": 1, "micro_batch_size": 4},
         "train": {"global_batch_size": 8, "grad_accum": 1},
         "hardware": {"name": "cpu_2proc", "devices_per_node": 2, "peak_tflops": 0.1, "precision": "fp32"}}


def test_a_resume_may_change_the_data_parallel_size_with_its_derived_keys_only():
    single = {"parallel": {"name": "single", "dp": 1, "tp": 1, "micro_batch_size": 8},
              "train": {"global_batch_size": 8, "grad_accum": 1},
              "hardware": {"name": "cpu", "devices_per_node": 1, "peak_tflops": 0.2, "precision": "fp32"}}
    assert [k for k, _, _ in resume_changes(SAVED, single, "ckpt")] == [
        "hardware.devices_per_node", "hardware.name", "hardware.peak_tflops",
        "parallel.dp", "parallel.micro_batch_size", "parallel.name"]
    # the same keys without a dp change are another layout, refused as before
    with pytest.raises(PretrainRunError, match="parallel.micro_batch_size"):
        resume_changes(SAVED, {**SAVED, "parallel": {**SAVED["parallel"], "micro_batch_size": 2}}, "ckpt")
    for key, value in (("train", {"global_batch_size": 16, "grad_accum": 2}),
                       ("parallel", {**single["parallel"], "tp": 2})):
        with pytest.raises(PretrainRunError, match="global_batch_size|parallel.tp"):
            resume_changes(SAVED, {**single, key: value}, "ckpt")


def test_restart_keys_are_checked_with_the_resilience_block():
    good = OmegaConf.structured(resilience.ResilienceConfig)
    assert list(resilience.problems(good)) == []
    bad = OmegaConf.merge(good, {"max_restarts": -1})
    (line,) = resilience.problems(bad)
    assert "resilience.max_restarts=-1" in line


def test_a_single_host_job_takes_a_free_port_when_its_own_is_busy(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        hw = {"master_addr": "127.0.0.1", "master_port": port, "num_nodes": 1, "devices_per_node": 2}
        out = msrun._free_port(OmegaConf.create({"hardware": hw}), tmp_path)
        assert out.hardware.master_port != port
        assert OmegaConf.load(tmp_path / "config.yaml").hardware.master_port == out.hardware.master_port
        several = OmegaConf.create({"hardware": {**hw, "num_nodes": 2}})   # nodes must agree on one port
        assert msrun._free_port(several, tmp_path) is several
        with pytest.raises(PretrainRunError, match="master_port"):
            msrun.check_port_free(several.hardware)


def test_the_stop_is_agreed_over_every_rank_of_the_job_not_only_data_parallel(monkeypatch):
    # a tensor-parallel-only layout has data-parallel degree 1: agreeing over dp alone would let one
    # rank stop while its tensor-parallel peers wait in the next collective
    from pretrain.resilience.signals import GracefulStop
    from pretrain.train import ranks
    monkeypatch.setenv("RANK_SIZE", "4")
    assert ranks.agreed_stop(GracefulStop()).degree == 4
    monkeypatch.delenv("RANK_SIZE")
    stop = GracefulStop()
    agreed = ranks.agreed_stop(stop)
    assert agreed.degree == 1 and not agreed.requested   # one process: the local flag, no collective
    stop.requested, stop.signum = True, 15
    assert agreed.requested and agreed.signal_name == "SIGTERM"


def test_the_ranks_agree_how_many_reads_apart_they_check_the_stop(monkeypatch):
    # two ranks whose reads come 0.1 s apart: after the warm-up they time TIMED_READS reads, and
    # from the sum of both ranks' times they check every 10th read (STOP_CHECK_S apart)
    from pretrain.resilience.signals import GracefulStop
    from pretrain.train import ranks
    from pretrain.train.measure import WARMUP_STEPS

    clock = [0.0]
    monkeypatch.setattr(ranks.time, "monotonic", lambda: clock[0])
    collectives = []

    def both_ranks(values):   # each rank contributes what this one does
        collectives.append(list(values))
        return [2 * v for v in values]

    stop = GracefulStop()
    agreed = ranks.AgreedStop(stop, degree=2, summed=both_ranks)
    agree_at = 2 + WARMUP_STEPS + ranks.TIMED_READS
    for _ in range(agree_at):
        assert not agreed.requested
        clock[0] += 0.1
    assert len(collectives) == agree_at and collectives[-1][1] == pytest.approx(ranks.TIMED_READS * 0.1)
    assert agreed.every == 10
    stop.requested, stop.signum = True, 15   # arrives between two checks: every rank sees it at the next
    seen = [agreed.requested for _ in range(10)]
    assert seen == [False] * 9 + [True] and len(collectives) == agree_at + 1
