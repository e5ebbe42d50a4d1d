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
    guard = SpikeGuard(ratio=2.0, consecutive=10, window=50, warmup_steps=20, best_margin=100.0)
    assert feed(guard, baseline(60)) == []
    plateau = [(s, 6.5) for s in range(61, 71)]
    assert feed(guard, plateau) == [70]
    assert guard.last_spike[:2] == (61, 70) and guard.last_spike.rule == "window"
    assert guard.last_spike.bar == pytest.approx(2 * sum(loss for _, loss in baseline(60)[10:]) / 50)


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


def test_the_window_bar_waits_for_its_warmup_the_uniform_and_best_bars_do_not():
    # 2.5x the level, but below the best bar (level + 100): only the window bar sees it, after warm-up
    guard = SpikeGuard(consecutive=3, warmup_steps=20, best_margin=100.0)
    assert feed(guard, baseline(5) + [(s, 7.5) for s in range(6, 12)]) == []
    # the same start, 30.0 (issue 40: 6.4 -> 56 inside the first steps): the best bar holds from step 2
    guard = SpikeGuard(consecutive=3, warmup_steps=20)
    assert feed(guard, baseline(5) + [(s, 30.0) for s in range(6, 9)]) == [8]
    assert guard.last_spike[:2] == (6, 8) and guard.last_spike.rule == "best"
    # and the uniform bar from step 1, before any loss was accepted
    guard = SpikeGuard(consecutive=3, vocab_size=4096)
    assert feed(guard, [(1, 60.0), (2, 60.0), (3, 60.0)]) == [3]
    assert guard.last_spike == (1, 3, 60.0, pytest.approx(math.log(4096) + 3.0), "uniform")


def uniform_start(n, vocab=4096, noise=0.01):
    """Losses of an untrained model: ln V, slowly falling, wiggling (the tiny default job's first steps:
    8.327 8.337 8.317 8.274 8.250 ...)."""
    return [(s, math.log(vocab) + 0.01 - 0.005 * s + noise * math.sin(3 * s)) for s in range(1, n + 1)]


def test_an_early_divergence_is_a_spike_before_the_window_fills_and_never_enters_it():
    """Issue 40: LR x3000 on early batches took the loss from 8.3 to 56-140, and the guard (still in
    its 20-step warm-up) learned that level as the run's normal."""
    guard = SpikeGuard(vocab_size=4096)                       # the defaults: 10 in a row, warm-up 20
    diverged = [(s, 56.0 + 9 * math.sin(s)) for s in range(5, 40)]
    assert feed(guard, uniform_start(4) + diverged) == [14, 24, 34]    # every 10 in a row, not learned
    assert guard.last_spike.first == 35 - 10
    window = [loss for _, loss in guard.state_dict()["window"]]
    assert len(window) == 4 and max(window) < 8.4               # only the healthy losses
    assert guard.best == pytest.approx(sum(window) / 4)
    # rolled back to step 3: the window holds steps 1..3 and the healthy run goes on from there
    guard.rewind(3)
    assert feed(guard, uniform_start(60)[3:]) == []


def test_a_slow_drift_upward_is_caught_by_the_best_level_the_window_learns_it():
    """A loss drifting up 0.02 per step: each step is close to the window's mean, so the window
    follows it; the best level does not."""
    curve = baseline(100) + [(s, 2.8 + 0.02 * (s - 100)) for s in range(101, 400)]
    window_only = SpikeGuard(vocab_size=4096, best_margin=1e6)
    assert feed(window_only, curve) == []
    guard = SpikeGuard(vocab_size=4096)
    confirmed = next(step for step, loss in curve if guard.observe(step, loss))
    # the best level is the lowest mean of 10 in a row (~2.8); 2 nats above it is reached near step 200
    first = guard.last_spike.first
    assert guard.last_spike.rule == "best" and confirmed == first + 9
    assert 2.8 + 0.02 * (first - 100) > guard.best + 2.0 >= 2.8 + 0.02 * (first - 101)
    assert 190 <= first <= 215


def test_a_healthy_noisy_curve_an_easy_batch_and_a_new_phase_do_not_fire():
    import random
    rng = random.Random(7)
    vocab = 4096
    # 3000 steps falling from ln V to ~3 (exponential), batch noise 0.3, an easy batch (0.5) and a
    # hard one (+3 nats) every 200 steps; then a new phase whose data sits 1.5 nats higher
    curve = []
    for s in range(1, 3001):
        loss = 3.0 + (math.log(vocab) - 3.0) * math.exp(-s / 300) + rng.gauss(0, 0.3)
        curve.append((s, 0.5 if s % 200 == 0 else loss + 3.0 if s % 200 == 100 else loss))
    guard = SpikeGuard(vocab_size=vocab)
    assert feed(guard, curve) == []
    assert 2.3 < guard.best < 3.0          # a mean of 10: an easy batch (0.5) did not set it
    guard.reset()
    assert guard.best is None
    assert feed(guard, [(s, 4.5 + rng.gauss(0, 0.3)) for s in range(3001, 3500)]) == []
    # a large model starts above ln V: logits of std 0.02 x sqrt(8192) cost ~1.6 nats (llama3_70b);
    # its LR warm-up keeps it there for many steps
    start = [(s, math.log(128256) + 1.6 - 0.001 * s) for s in range(1, 200)]
    assert feed(SpikeGuard(vocab_size=128256), start) == []


def test_sigma_rule_detects_a_jump_many_deviations_out():
    guard = SpikeGuard(rule="sigma", sigma=6.0, consecutive=3)
    feed(guard, baseline(60))
    assert feed(guard, [(61, 3.3), (62, 3.3), (63, 3.3), (64, 3.3)]) == [63]   # ~ +8 sigma, not 2x
    assert guard.last_spike[:2] == (61, 63) and guard.last_spike.rule == "window"
    assert SpikeGuard(rule="ratio", consecutive=3).observe(1, 3.3) is False


def test_state_dict_round_trip_mid_suspicion_continues_identically():
    guard = SpikeGuard(consecutive=10)
    feed(guard, baseline(60) + [(s, 6.5) for s in range(61, 66)])     # 5 of 10 suspect steps seen
    guard.record_rollback(30)
    restored = SpikeGuard(consecutive=10)
    restored.load_state_dict(json.loads(json.dumps(guard.state_dict())))
    rest = [(s, 6.5) for s in range(66, 71)] + baseline(20, start=71)
    assert [guard.observe(s, l) for s, l in rest] == [restored.observe(s, l) for s, l in rest]
    assert restored.last_spike == guard.last_spike and guard.last_spike[:2] == (61, 70)
    assert restored.state_dict() == guard.state_dict()


def test_a_resumed_guard_keeps_the_best_level_and_an_older_checkpoint_still_loads():
    """A run that fell to ~2.4 and is resumed: 4.6 is a spike for it (> best + 2) though below the
    window's 2x mean; a guard that forgot the best level would take it as the new normal."""
    guard = SpikeGuard(vocab_size=4096)
    feed(guard, baseline(300))
    state = json.loads(json.dumps(guard.state_dict()))
    assert state["best"] == pytest.approx(guard.best) and 2.3 < guard.best < 2.5
    resumed = SpikeGuard(vocab_size=4096)
    resumed.load_state_dict(state)
    plateau = [(s, 4.6) for s in range(301, 311)]
    assert feed(resumed, plateau) == [310] and resumed.last_spike.rule == "best"
    forgot = SpikeGuard(vocab_size=4096)
    forgot.load_state_dict({**state, "best": None})
    assert feed(forgot, plateau) == []
    older = {k: v for k, v in state.items() if k != "best"}        # a checkpoint from before issue 40
    older["last_spike"] = [61, 70]
    aged = SpikeGuard(vocab_size=4096)
    aged.load_state_dict(older)
    assert aged.best is None and aged.last_spike is None
    assert feed(aged, baseline(20, start=301)) == []
    assert aged.best == pytest.approx(sum(loss for _, loss in baseline(20, start=301)[-10:]) / 10, abs=0.05)


def test_rollback_limit_counts_within_the_window_only():
    guard = SpikeGuard(max_rollbacks=2, rollback_window_steps=100)
    for step in (100, 300, 500, 700):           # far apart: never more than one in any window
        guard.record_rollback(step)
    guard.record_rollback(750)
    with pytest.raises(PretrainRunError, match=r"limit at step 740; 3 rollbacks within 100 steps "
                                               r"\(at steps \[700, 750, 740\]; resilience.max_rollbacks=2\)"):
        guard.record_rollback(740)              # steps go back after a rollback; still the same window


def test_rewind_forgets_losses_of_steps_that_will_be_rerun():
    guard = SpikeGuard(window=100)
    feed(guard, baseline(60))
    guard.rewind(40)
    assert [s for s, _ in guard.state_dict()["window"]] == list(range(1, 41))


@pytest.mark.parametrize("kwargs, key", [
    ({"rule": "median"}, "spike_rule"), ({"ratio": 1.0}, "spike_ratio"),
    ({"consecutive": 0}, "spike_consecutive"), ({"window": 1}, "spike_window"),
    ({"max_rollbacks": -1}, "max_rollbacks"), ({"uniform_margin": -1.0}, "spike_uniform_margin"),
    ({"best_margin": 0.0}, "spike_best_margin"),
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
        spike_warmup_steps=9, max_rollbacks=2, rollback_window_steps=300, max_nonfinite_in_row=6,
        spike_uniform_margin=0.5, spike_best_margin=1.5))
    guard = spike_guard(res, vocab_size=512)
    assert (guard.rule, guard.ratio, guard.consecutive, guard._window.maxlen, guard.sigma, guard.warmup_steps,
            guard.max_rollbacks, guard.rollback_window_steps, guard.uniform_margin, guard.best_margin,
            guard.vocab_size) == ("sigma", 3.0, 4, 7, 5.0, 9, 2, 300, 0.5, 1.5, 512)
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
