"""SpikeGuard, NonFiniteGuard and the resilience config block (pure logic, no MindSpore)."""
import json
import math

import pytest
from omegaconf import OmegaConf

from pretrain.config.errors import PretrainConfigError, PretrainRunError
from pretrain.config.resilience import ResilienceConfig, problems
from pretrain.resilience.guards import nonfinite_guard, spike_guard, watchdog
from pretrain.resilience.nonfinite import NonFiniteGuard
from pretrain.resilience.spike import SpikeGuard


def baseline(n, start=1, level=3.0):
    """A slowly falling, wiggling loss curve: steps start..start+n-1."""
    return [(s, level - 0.002 * s + 0.05 * math.sin(s)) for s in range(start, start + n)]


def feed(guard, losses):
    return [step for step, loss in losses if guard.observe(step, loss)]


def test_ratio_rule_confirms_a_ten_step_plateau_at_twice_the_mean():
    guard = SpikeGuard(ratio=2.0, consecutive=10, window=50, warmup_steps=20)
    assert feed(guard, baseline(60)) == []
    plateau = [(s, 6.5) for s in range(61, 71)]
    assert feed(guard, plateau) == [70]
    assert guard.last_spike == (61, 70)


def test_single_outlier_and_short_bursts_are_not_spikes_and_do_not_move_the_bar():
    guard = SpikeGuard(ratio=2.0, consecutive=10)
    feed(guard, baseline(60))
    bar = guard.threshold()
    assert feed(guard, [(61, 50.0)]) == []
    assert guard.threshold() == pytest.approx(bar, rel=0.01)      # the outlier did not enter the mean
    assert feed(guard, [(62, 2.9)] + [(s, 6.5) for s in range(63, 72)] + [(72, 2.9)]) == []   # 9 in a row
    assert feed(guard, baseline(30, start=73)) == []
    assert guard.last_spike is None


def test_non_finite_losses_are_ignored_not_averaged():
    guard = SpikeGuard()
    feed(guard, baseline(60))
    bar = guard.threshold()
    assert not guard.observe(61, float("nan")) and not guard.observe(62, float("inf"))
    assert guard.threshold() == bar


def test_no_detection_during_warmup():
    guard = SpikeGuard(consecutive=3, warmup_steps=20)
    assert feed(guard, baseline(5) + [(s, 30.0) for s in range(6, 12)]) == []


def test_sigma_rule_detects_a_jump_many_deviations_out():
    guard = SpikeGuard(rule="sigma", sigma=6.0, consecutive=3)
    feed(guard, baseline(60))
    assert feed(guard, [(61, 3.3), (62, 3.3), (63, 3.3), (64, 3.3)]) == [63]   # ~ +8 sigma, not 2x
    assert guard.last_spike == (61, 63)
    assert SpikeGuard(rule="ratio", consecutive=3).observe(1, 3.3) is False


def test_state_dict_round_trip_mid_suspicion_continues_identically():
    guard = SpikeGuard(consecutive=10)
    feed(guard, baseline(60) + [(s, 6.5) for s in range(61, 66)])     # 5 of 10 suspect steps seen
    guard.record_rollback(30)
    restored = SpikeGuard(consecutive=10)
    restored.load_state_dict(json.loads(json.dumps(guard.state_dict())))
    rest = [(s, 6.5) for s in range(66, 71)] + baseline(20, start=71)
    assert [guard.observe(s, l) for s, l in rest] == [restored.observe(s, l) for s, l in rest]
    assert restored.last_spike == guard.last_spike == (61, 70)
    assert restored.state_dict() == guard.state_dict()


def test_rollback_limit_counts_within_the_window_only():
    guard = SpikeGuard(max_rollbacks=2, rollback_window_steps=100)
    for step in (100, 300, 500, 700):           # far apart: never more than one in any window
        guard.record_rollback(step)
    guard.record_rollback(750)
    with pytest.raises(PretrainRunError, match=r"limit: 3 rollbacks within 100 steps .*\[700, 750, 740\]"):
        guard.record_rollback(740)              # steps go back after a rollback; still the same window


def test_rewind_forgets_losses_of_steps_that_will_be_rerun():
    guard = SpikeGuard(window=100)
    feed(guard, baseline(60))
    guard.rewind(40)
    assert [s for s, _ in guard.state_dict()["window"]] == list(range(1, 41))


@pytest.mark.parametrize("kwargs, key", [
    ({"rule": "median"}, "spike_rule"), ({"ratio": 1.0}, "spike_ratio"),
    ({"consecutive": 0}, "spike_consecutive"), ({"window": 1}, "spike_window"),
    ({"max_rollbacks": -1}, "max_rollbacks"),
])
def test_bad_settings_name_the_config_key(kwargs, key):
    with pytest.raises(PretrainConfigError, match=rf"resilience\.{key}="):
        SpikeGuard(**kwargs)


def test_nonfinite_guard_counts_runs_and_stops_past_the_limit():
    guard = NonFiniteGuard(max_consecutive=3)
    run = [(1, True), (2, False), (3, False), (4, True)]
    assert [guard.observe(s, f) for s, f in run] == [False, True, True, False]
    assert guard.consecutive == 0 and guard.total_skipped == 2
    for step in (5, 6, 7):
        assert guard.observe(step, False)
    restored = NonFiniteGuard(max_consecutive=3)
    restored.load_state_dict(json.loads(json.dumps(guard.state_dict())))
    with pytest.raises(PretrainRunError, match=r"4 steps in a row \(up to step 8\).*max_nonfinite_in_row=3"):
        restored.observe(8, False)


def test_config_block_builds_guards_with_every_field(tmp_path):
    res = OmegaConf.structured(ResilienceConfig(
        spike_rule="sigma", spike_ratio=3.0, spike_consecutive=4, spike_window=7, spike_sigma=5.0,
        spike_warmup_steps=9, max_rollbacks=2, rollback_window_steps=300, max_nonfinite_in_row=6))
    guard = spike_guard(res)
    assert (guard.rule, guard.ratio, guard.consecutive, guard._window.maxlen, guard.sigma, guard.warmup_steps,
            guard.max_rollbacks, guard.rollback_window_steps) == ("sigma", 3.0, 4, 7, 5.0, 9, 2, 300)
    assert nonfinite_guard(res).max_consecutive == 6
    timeouts = ResilienceConfig(watchdog_timeout_s=5, first_step_timeout_s=50)
    dog = watchdog(OmegaConf.structured(timeouts), tmp_path)
    assert (dog.timeout_s, dog.first_timeout_s, dog.stacks_path) == (5, 50, tmp_path / "hang_stacks.txt")
    with pytest.raises(PretrainConfigError, match="resilience.watchdog_timeout_s=0"):
        watchdog(OmegaConf.structured(ResilienceConfig(watchdog_timeout_s=0)), tmp_path)
    with pytest.raises(Exception, match="spike_ratio"):
        OmegaConf.merge(OmegaConf.structured(ResilienceConfig), {"spike_ratio": "high"})


def test_problems_lists_each_bad_setting_once():
    assert list(problems(OmegaConf.structured(ResilienceConfig))) == []
    bad = ResilienceConfig(spike_ratio=0.5, max_nonfinite_in_row=0, first_step_timeout_s=-1)
    found = list(problems(OmegaConf.structured(bad)))
    assert len(found) == 3
    for key, line in zip(("spike_ratio=0.5", "max_nonfinite_in_row=0", "first_step_timeout_s=-1"), found):
        assert key in line
