"""The job controller's parts that need no cluster: the progress watchdog (no new step), the tree
tag that finds a node's processes after setsid, and the scheduler's failure report."""
import json
import os
import time

from omegaconf import OmegaConf

from pretrain.launch.controller import Progress
from pretrain.launch.msrun import scheduler_failed

RES = OmegaConf.create({"watchdog_timeout_s": 100, "first_step_timeout_s": 1000})


def test_no_first_step_and_no_new_step_are_failures_past_their_timeouts(tmp_path):
    progress = Progress(tmp_path, RES)
    progress.restart()
    assert progress.stalled() is None
    progress.started -= 1031   # no line yet, past first_step_timeout_s + the margin
    assert "no first step in 1030 s" in progress.stalled().message
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"kind": "train", "step": 1}\n')
    assert progress.stalled() is None    # a step since this generation started
    old = time.time() - 131
    os.utime(metrics, (old, old))
    progress.seen = old - 1
    failure = progress.stalled()
    assert "no new step in 130 s" in failure.message and failure.retryable


def test_a_scheduler_that_could_not_bind_is_a_failure_naming_its_port(tmp_path):
    assert scheduler_failed(tmp_path) is None
    report = {"exit": 1, "port": "8118", "error": "RuntimeError: x"}
    (tmp_path / "scheduler.exit").write_text(json.dumps(report))
    failure = scheduler_failed(tmp_path)
    assert failure.cause == "scheduler" and "scheduler on port 8118 failed at once" in failure.message


# what MindSpore 2.9's scheduler raised when node 1's whole tree was stopped (SIGSTOP) in the 2-node job
TIMED_OUT = ("RuntimeError: The total number of timed out node is 1. Timed out node list is: [const vector]"
             "{3}, worker 3 is the first one timed out, please check its log.")


def test_a_scheduler_that_heard_no_heartbeat_names_the_rank_and_node_that_timed_out(tmp_path):
    """Not "failed at once ... the port was taken" (which restarted on another port, and named no
    node): the rank (and, for the job controller, its node) that stopped sending heartbeats."""
    (tmp_path / "scheduler.exit").write_text(json.dumps({"exit": 1, "port": "8118", "error": TIMED_OUT}))
    failure = scheduler_failed(tmp_path, per_node=2)
    assert (failure.rank, failure.exit, failure.cause, failure.retryable) == (3, None, "timeout", True)
    assert failure.message.startswith("node 1 (rank 3) timed out: msrun's scheduler heard no heartbeat")
    assert "port was taken" not in failure.message
    assert scheduler_failed(tmp_path).message.startswith("rank 3 timed out")   # one host: msrun's ranks


def test_a_phase_loss_log_of_mindformers_engine_counts_as_progress(tmp_path):
    progress = Progress(tmp_path, RES)
    progress.restart()
    progress.started -= 2000   # past the first-step timeout, but a step was logged since the start
    log = tmp_path / "mindformers" / "general" / "losses.jsonl"
    log.parent.mkdir(parents=True)
    log.write_text('{"step": 1}\n')
    assert progress.stalled() is None
    old = time.time() - 131
    os.utime(log, (old, old))
    assert "no new step in 130 s" in progress.stalled().message


def test_the_compile_cache_is_one_per_config_less_the_port_and_a_users_own_setting_wins(tmp_path):
    from pretrain.launch import compile_cache
    cfg = OmegaConf.create({"parallel": {"dp": 2}, "hardware": {"master_port": 1, "master_addr": "a"}})
    moved = OmegaConf.merge(cfg, {"hardware": {"master_port": 2, "master_addr": "b"}})
    shrunk = OmegaConf.merge(cfg, {"parallel": {"dp": 1}})
    env = compile_cache.env(cfg, tmp_path, {})
    assert env["MS_COMPILER_CACHE_ENABLE"] == "1"
    assert env == compile_cache.env(moved, tmp_path, {}) != compile_cache.env(shrunk, tmp_path, {})
    assert env["MS_COMPILER_CACHE_PATH"].startswith(str(tmp_path.resolve() / "compile_cache"))
    assert compile_cache.env(cfg, tmp_path, {"MS_COMPILER_CACHE_ENABLE": "0"}) == {}
