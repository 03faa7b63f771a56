# Copyright 2026 The async_rl_ros Authors
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""Tests of the training doctor: every detector fires on its condition and only then."""

from __future__ import annotations

import copy
import logging
import math

from async_rl_ros.core.config import ConfigError, SACConfig
from async_rl_ros.core.learning.doctor import (all_finite, cosine_similarity, Doctor, DoctorConfig,
                                               finite_rows, GoodState, ParamDeltaTracker,
                                               params_finite, RunningStats, TrainingDiverged,
                                               update_ratio)
import numpy as np
import pytest
import torch
from torch import nn

torch.set_num_threads(1)


class FakeKnobs:
    """Record the remedies the doctor applies."""

    def __init__(self):
        self.calls = []
        self.lr = 3e-4
        self.alpha = 0.2
        self.reg = 1.0

    def scale_learning_rate(self, factor):
        """Record and apply a learning-rate change."""
        self.calls.append(('scale_learning_rate', factor))
        self.lr *= factor
        return self.lr

    def scale_temperature(self, factor):
        """Record and apply a temperature change."""
        self.calls.append(('scale_temperature', factor))
        self.alpha *= factor
        return self.alpha

    def scale_policy_regularization(self, factor):
        """Record and apply a regularization change."""
        self.calls.append(('scale_policy_regularization', factor))
        self.reg *= factor
        return self.reg


def make_doctor(**overrides):
    knobs = FakeKnobs()
    cfg = DoctorConfig().replace(**overrides) if overrides else DoctorConfig()
    return Doctor(cfg, knobs=knobs), knobs


def tiny_learner(seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    log_alpha = torch.zeros(1, requires_grad=True)
    opt = torch.optim.Adam(list(model.parameters()) + [log_alpha], lr=1e-2)
    return model, log_alpha, opt


def good_step(model, log_alpha, opt, doctor, x):
    opt.zero_grad()
    loss = model(x).pow(2).mean() + log_alpha.pow(2).sum()
    loss.backward()
    norm = float(nn.utils.clip_grad_norm_(list(model.parameters()) + [log_alpha], 1.0))
    ok = doctor.step_ok({'loss': loss}, list(model.parameters()) + [log_alpha], grad_norm=norm)
    if ok:
        opt.step()
    return ok


def state_copy(model, log_alpha, opt):
    params = {k: v.clone() for k, v in model.state_dict().items()}
    opt_state = {i: {k: v.clone() if torch.is_tensor(v) else v for k, v in s.items()}
                 for i, s in opt.state_dict()['state'].items()}
    return params, log_alpha.detach().clone(), opt_state


def assert_same_state(a, b):
    params_a, alpha_a, opt_a = a
    params_b, alpha_b, opt_b = b
    assert params_a.keys() == params_b.keys()
    for k in params_a:
        assert torch.equal(params_a[k], params_b[k]), k
    assert torch.equal(alpha_a, alpha_b)
    assert opt_a.keys() == opt_b.keys()
    for i in opt_a:
        assert opt_a[i].keys() == opt_b[i].keys()
        for k in opt_a[i]:
            va, vb = opt_a[i][k], opt_b[i][k]
            assert torch.equal(va, vb) if torch.is_tensor(va) else va == vb, (i, k)


# ---------------------------------------------------------------------- configuration
def test_config_defaults_validate_and_band_is_checked():
    DoctorConfig().validate()
    with pytest.raises(ConfigError, match='update_ratio_low'):
        DoctorConfig(update_ratio_low=1e-3, update_ratio_high=1e-4).validate()
    with pytest.raises(ConfigError, match='reward_scale_factor'):
        DoctorConfig(reward_scale_factor=0.5).validate()


@pytest.mark.parametrize('norm,warns', [(1.0, False), (0.5, False), (0.75, False),
                                        (2.0, True), (0.1, True), (0.0, True)])
def test_grad_clip_outside_recommended_range_warns(caplog, norm, warns):
    with caplog.at_level(logging.WARNING, logger='async_rl_ros.core.config'):
        SACConfig(grad_clip_norm=norm).validate()
    assert any('grad_clip_norm' in r.getMessage() for r in caplog.records) == warns


# ---------------------------------------------------------------------- non-finite values
def test_nan_loss_skips_step_and_restores_remembered_state():
    doctor, _ = make_doctor(snapshot_interval_steps=1000)
    model, log_alpha, opt = tiny_learner()
    x = torch.randn(16, 4)
    for step in range(3):
        doctor.begin_step(step)
        assert good_step(model, log_alpha, opt, doctor, x)
    doctor.begin_step(3)
    assert doctor.remember({'actor': model}, {'opt': opt}, {'log_alpha': log_alpha})
    remembered = state_copy(model, log_alpha, opt)
    for step in range(4, 7):
        doctor.begin_step(step)
        assert good_step(model, log_alpha, opt, doctor, x)
        assert not doctor.remember({'actor': model}, {'opt': opt}, {'log_alpha': log_alpha})
    moved = state_copy(model, log_alpha, opt)
    with pytest.raises(AssertionError):
        assert_same_state(remembered, moved)

    doctor.begin_step(7)
    opt.zero_grad()
    loss = model(x).pow(2).mean() * float('nan')
    loss.backward()
    params = list(model.parameters()) + [log_alpha]
    assert not doctor.step_ok({'critic': loss}, params)
    assert all(p.grad is None for p in params)
    assert_same_state(remembered, state_copy(model, log_alpha, opt))
    assert doctor.nan_skips == 1
    assert doctor.metrics()['doctor/nan_skips'] == 1.0
    event = doctor.events[-1]
    assert event.detector == 'non_finite' and 'critic' in event.reason
    assert 'restored the snapshot of step 3' in event.reason
    # The restored optimizer still works and the next good step counts as healthy.
    doctor.begin_step(8)
    assert good_step(model, log_alpha, opt, doctor, x)
    assert doctor.consecutive_skips == 0 and doctor.nan_skips == 1


def test_nan_gradient_detected_by_norm_and_by_scan():
    doctor, _ = make_doctor()
    model, log_alpha, opt = tiny_learner()
    doctor.remember({'m': model}, {'o': opt}, {'a': log_alpha}, force=True)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    next(model.parameters()).grad[0, 0] = float('inf')
    assert not doctor.step_ok({'loss': torch.tensor(1.0)}, model)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    next(model.parameters()).grad[0, 0] = float('nan')
    norm = float(nn.utils.clip_grad_norm_(model.parameters(), 1.0))
    assert math.isnan(norm)
    assert not doctor.step_ok({'loss': 1.0}, model, grad_norm=norm)
    assert doctor.nan_skips == 2


def test_bad_batch_is_skipped_and_counted():
    doctor, knobs = make_doctor()
    good = {'obs': torch.randn(8, 3), 'act': np.zeros((8, 2)), 'done': torch.zeros(8, dtype=int)}
    assert doctor.batch_ok(good)
    bad = dict(good, reward=torch.tensor([0.0, float('nan')] * 4))
    assert not doctor.batch_ok(bad)
    assert doctor.bad_batches == 1 and doctor.nan_skips == 1
    assert 'reward' in doctor.events[-1].reason
    assert knobs.calls == []
    mask = finite_rows(bad)
    assert mask.tolist() == [True, False] * 4


def test_consecutive_skips_raise_training_diverged():
    doctor, _ = make_doctor(max_consecutive_skips=3)
    for step in range(3):
        doctor.begin_step(step)
        assert not doctor.step_ok(float('nan'))
    with pytest.raises(TrainingDiverged):
        doctor.step_ok(float('nan'))


def test_never_publish_or_remember_non_finite_weights():
    doctor, _ = make_doctor()
    model, log_alpha, opt = tiny_learner()
    assert params_finite(model) and doctor.publish_ok(model)
    with torch.no_grad():
        model[0].weight[1, 1] = float('nan')
    assert not params_finite(model)
    assert not doctor.publish_ok(model)
    assert doctor.blocked_publishes == 1
    assert not doctor.remember({'m': model}, {'o': opt}, force=True)
    assert not doctor.good_state.has_snapshot


def test_good_state_keeps_hyperparameters_changed_by_remedies():
    model, log_alpha, opt = tiny_learner()
    state = GoodState()
    state.remember({'m': model}, {'o': opt}, {'a': log_alpha})
    for group in opt.param_groups:
        group['lr'] *= 0.8
    state.restore()
    assert opt.param_groups[0]['lr'] == pytest.approx(0.8e-2)
    state.restore(keep_hyperparameters=False)
    assert opt.param_groups[0]['lr'] == pytest.approx(1e-2)
    with pytest.raises(RuntimeError):
        GoodState().restore()


def test_all_finite_helpers():
    assert all_finite([torch.ones(3), np.ones(2), np.arange(3), torch.arange(3)])
    assert not all_finite([torch.ones(3), np.array([1.0, np.inf])])
    assert not all_finite([torch.tensor([float('nan')])])


# ---------------------------------------------------------------------- update ratio
def test_update_ratio_outside_band_warns_rate_limited(caplog):
    doctor, knobs = make_doctor(warn_interval_steps=100, update_ratio_window=1,
                                warmup_updates=0)
    p = nn.Parameter(torch.ones(1000, dtype=torch.float64))
    tracker = ParamDeltaTracker([p])
    with caplog.at_level(logging.WARNING, logger='async_rl_ros.core.learning.doctor'):
        for step, delta in enumerate([5e-4, 1e-2, 1e-2, 1e-6]):
            doctor.begin_step(step)
            assert doctor.update_ratio_due() == (step % 10 == 0)
            tracker.capture()
            before = float(p[0].detach())
            with torch.no_grad():
                p.add_(delta)
            ratio = tracker.ratio()
            assert ratio == pytest.approx(delta / before, rel=1e-3)
            doctor.observe_update_ratio(ratio, 'actor')
    assert doctor.detections['update_ratio'] == 3
    logged = [r for r in caplog.records if 'update ratio' in r.getMessage()]
    assert len(logged) == 1 and 'above the healthy band' in logged[0].getMessage()
    assert len(doctor.events) == 1 and doctor.events[0].threshold == pytest.approx(1e-3)
    assert knobs.calls == []
    assert 'doctor/update_ratio/actor' in doctor.metrics()
    assert tracker.ratio() is None


def test_the_update_ratio_band_judges_a_window_not_a_single_update():
    """A healthy run's occasional large update is not a finding; a sustained drift is."""
    doctor, _ = make_doctor(update_ratio_window=5, warmup_updates=0)
    healthy = [5e-4, 6e-4, 2e-3, 5e-4, 4e-4, 5e-4, 1.5e-3, 6e-4]  # spikes above 1e-3
    for step, ratio in enumerate(healthy):
        doctor.begin_step(step)
        assert doctor.observe_update_ratio(ratio, 'actor')
    assert doctor.detections['update_ratio'] == 0
    assert doctor.metrics()['doctor/update_ratio_mean/actor'] == pytest.approx(
        np.mean(healthy[-5:]))
    for step in range(8, 13):  # drifting up: the mean leaves the band
        doctor.begin_step(step)
        doctor.observe_update_ratio(3e-3, 'actor')
    assert doctor.detections['update_ratio'] >= 1
    assert 'mean of the last 5' in doctor.events[-1].reason


def test_the_update_ratio_is_judged_after_the_warmup_updates():
    """The first Adam steps are large against the initial weights: measured, not judged."""
    doctor, _ = make_doctor(update_ratio_window=2, warmup_updates=100)
    for step in range(0, 100, 10):
        doctor.begin_step(step)
        assert doctor.observe_update_ratio(3e-3, 'actor')
    assert doctor.detections['update_ratio'] == 0
    assert doctor.metrics()['doctor/update_ratio_mean/actor'] == pytest.approx(3e-3)
    doctor.begin_step(100)
    assert not doctor.observe_update_ratio(3e-3, 'actor')
    assert doctor.detections['update_ratio'] == 1


def test_update_ratio_function():
    before = torch.tensor([3.0, 4.0])
    after = before + torch.tensor([0.0, 0.005])
    assert update_ratio(before, after) == pytest.approx(1e-3, rel=1e-4)


# ---------------------------------------------------------------------- reward scale
def test_running_stats_match_numpy():
    rng = np.random.default_rng(0)
    data = rng.normal(2.0, 3.0, 1000)
    stats = RunningStats()
    for chunk in np.array_split(data, 7):
        stats.update(chunk)
    stats.update(np.array([np.nan]))
    assert stats.count == 1000
    assert stats.mean == pytest.approx(data.mean())
    assert stats.std == pytest.approx(data.std())
    assert stats.abs_mean == pytest.approx(np.abs(data).mean())


@pytest.mark.parametrize('statistic', ['std', 'mean_abs'])
def test_reward_scale_mismatch_flags_the_odd_worker(statistic):
    doctor, knobs = make_doctor(reward_min_samples=200, reward_scale_statistic=statistic)
    rng = np.random.default_rng(1)
    for _ in range(4):
        assert doctor.observe_rewards(0, rng.normal(-1.0, 1.0, 100))
        assert doctor.observe_rewards(1, rng.normal(-1.0, 1.0, 100))
        doctor.observe_rewards('w2', 10.0 * rng.normal(-1.0, 1.0, 100))
    assert doctor.detections['reward_scale'] >= 1
    flagged = {e.reason.split()[1] for e in doctor.events}
    assert flagged == {'w2'}
    assert doctor.events[0].value > 3.0 and doctor.events[0].threshold == 3.0
    assert knobs.calls == []
    assert doctor.metrics()['doctor/reward_scale_ratio'] > 3.0


def test_a_sparse_reward_is_judged_by_its_scale_not_by_how_often_a_worker_succeeded():
    """
    Push rewards are -1 until the cube is at the target, then 0: two healthy workers.

    One has not succeeded yet (every reward -1: a standard deviation of 0), the other has, a
    little. The shipped statistic (mean |r|) sees one scale; the deviation saw a factor 10^10
    (ROS 2 push, two workers). A worker whose rewards are ten times as large is still flagged.
    """
    rng = np.random.default_rng(3)

    def sparse(successes: float, n: int = 100) -> np.ndarray:
        return np.where(rng.random(n) < successes, 0.0, -1.0)

    shipped, _ = make_doctor(reward_min_samples=200)
    deviation, _ = make_doctor(reward_min_samples=200, reward_scale_statistic='std')
    for _ in range(10):
        for doctor in (shipped, deviation):
            doctor.observe_rewards(0, sparse(0.0))
            doctor.observe_rewards(1, sparse(0.05))
    assert shipped.detections['reward_scale'] == 0
    assert deviation.detections['reward_scale'] > 0  # what the default used to report
    for _ in range(10):
        shipped.observe_rewards(2, 10.0 * sparse(0.02))
    assert shipped.detections['reward_scale'] >= 1


def test_reward_scale_needs_two_workers_and_enough_samples():
    doctor, _ = make_doctor(reward_min_samples=500)
    rng = np.random.default_rng(2)
    assert doctor.observe_rewards(0, rng.normal(0, 1, 1000))
    assert doctor.observe_rewards(1, 50 * rng.normal(0, 1, 100))  # too few samples
    assert doctor.events == []
    assert not doctor.observe_rewards(1, 50 * rng.normal(0, 1, 1000))


# ---------------------------------------------------------------------- policy divergence
def test_policy_divergence_raises_regularization_with_cooldown():
    doctor, knobs = make_doctor(remedy_cooldown_steps=10, warmup_updates=0)
    torch.manual_seed(0)
    policy = nn.Linear(5, 3)
    probe = torch.randn(64, 5)
    doctor.set_probe(probe)
    assert doctor.probe is probe
    flipped = nn.Linear(5, 3)
    with torch.no_grad():
        flipped.weight.copy_(-policy.weight)
        flipped.bias.copy_(-policy.bias)
    doctor.begin_step(0)
    cos = doctor.policy_divergence(policy, {0: policy, 1: flipped})
    assert cos[0] == pytest.approx(1.0) and cos[1] == pytest.approx(-1.0)
    assert knobs.calls == [('scale_policy_regularization', 1.5)]
    assert doctor.events[-1].detector == 'policy_divergence'
    assert doctor.events[-1].remedy.startswith('scale_policy_regularization(1.5)')
    assert doctor.metrics()['doctor/min_policy_cosine'] == pytest.approx(-1.0)
    doctor.begin_step(5)
    doctor.policy_divergence(policy(probe), {1: flipped(probe)})
    assert len(knobs.calls) == 1  # cooldown
    doctor.begin_step(10)
    doctor.policy_divergence(policy, {1: flipped})
    assert len(knobs.calls) == 2 and knobs.reg == pytest.approx(2.25)


def test_policy_divergence_is_measured_but_not_judged_during_the_warmup():
    """A young policy moves fast between versions: no remedy before ``warmup_updates``."""
    doctor, knobs = make_doctor(warmup_updates=100)
    torch.manual_seed(0)
    policy, probe = nn.Linear(5, 3), torch.randn(64, 5)
    doctor.set_probe(probe)
    with torch.no_grad():
        flipped = -policy(probe)
    doctor.begin_step(99)
    assert doctor.policy_divergence(policy, {0: flipped})[0] == pytest.approx(-1.0)
    assert doctor.metrics()['doctor/min_policy_cosine'] == pytest.approx(-1.0)
    assert knobs.calls == [] and doctor.detections['policy_divergence'] == 0
    doctor.begin_step(100)
    doctor.policy_divergence(policy, {0: flipped})
    assert knobs.calls == [('scale_policy_regularization', 1.5)]


def test_cosine_similarity_edge_cases():
    assert cosine_similarity(np.zeros(4), np.zeros(4)) == 1.0
    assert cosine_similarity(np.zeros(4), np.ones(4)) == 0.0
    assert cosine_similarity(np.ones((2, 2)), 2 * np.ones((2, 2))) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        cosine_similarity(np.ones(3), np.ones(4))


# ---------------------------------------------------------------------- exploration
def test_entropy_collapse_raises_temperature():
    doctor, knobs = make_doctor(min_entropy=-6.0)
    doctor.begin_step(1)
    assert not doctor.observe_entropy(-9.5)
    assert knobs.calls == [('scale_temperature', 1.1)]
    assert knobs.alpha == pytest.approx(0.22)
    event = doctor.events[-1]
    assert (event.detector, event.value, event.threshold) == ('exploration', -9.5, -6.0)
    assert '0.22' in event.remedy
    assert doctor.metrics()['doctor/entropy'] == -9.5


# ---------------------------------------------------------------------- staleness
def test_stale_transitions_lower_learning_rate(caplog):
    doctor, knobs = make_doctor(max_policy_lag=20.0)
    with caplog.at_level(logging.WARNING, logger='async_rl_ros.core.learning.doctor'):
        assert doctor.observe_lag(np.array([10, 20, 30]))  # mean 20: at the bound
        assert not doctor.observe_lag(torch.tensor([30, 40, 50]))
    assert knobs.calls == [('scale_learning_rate', 0.8)]
    assert knobs.lr == pytest.approx(2.4e-4)
    assert doctor.metrics()['doctor/policy_lag'] == 40.0
    assert doctor.metrics()['doctor/policy_lag_max'] == 50.0
    message = caplog.records[-1].getMessage()
    assert 'staleness' in message and 'value 40' in message and 'threshold 20' in message


def test_a_remedy_is_undone_once_its_detector_stays_quiet(caplog):
    doctor, knobs = make_doctor(max_policy_lag=20.0, remedy_recovery_steps=100,
                                remedy_cooldown_steps=10)
    doctor.begin_step(0)
    assert not doctor.observe_lag([50])
    doctor.begin_step(10)
    assert not doctor.observe_lag([50])  # the symptom persists: a second remedy
    assert knobs.lr == pytest.approx(3e-4 * 0.8 ** 2)
    assert doctor.metrics()['doctor/remedies_in_force'] == 2.0
    with caplog.at_level(logging.WARNING, logger='async_rl_ros.core.learning.doctor'):
        for step in range(11, 400):
            doctor.begin_step(step)
            assert doctor.observe_lag([5])
            if step == 60:  # the symptom once more: the quiet interval starts again
                assert not doctor.observe_lag([50])  # past the cooldown: a third remedy
    undone = [c for c in knobs.calls if c[1] > 1.0]
    assert undone == [('scale_learning_rate', pytest.approx(1.25))] * 3
    assert knobs.lr == pytest.approx(3e-4)
    # Undone 100 quiet updates after the last detection (step 60), then 100 apart.
    events = [e for e in doctor.events if 'remedy undone' in e.reason]
    assert [e.step for e in events] == [160, 260, 360]
    assert events[0].value == 100.0 and events[0].threshold == 100.0
    assert 'no staleness detection for 100 updates' in events[0].reason
    assert any('remedy undone' in r.getMessage() for r in caplog.records)
    metrics = doctor.metrics()
    assert metrics['doctor/remedies_total'] == 3.0 and metrics['doctor/remedies_undone'] == 3.0
    assert metrics['doctor/remedies_in_force'] == 0.0
    assert metrics['doctor/detections/staleness'] == 3.0


def test_remedies_stay_for_good_when_recovery_is_off():
    doctor, knobs = make_doctor(min_entropy=-6.0, remedy_recovery_steps=0)
    doctor.begin_step(0)
    assert not doctor.observe_entropy(-9.0)
    for step in range(1, 2000, 100):
        doctor.begin_step(step)
        assert doctor.observe_entropy(-3.0)
    assert knobs.calls == [('scale_temperature', 1.1)]
    assert doctor.metrics()['doctor/remedies_in_force'] == 1.0


def test_a_resumed_doctor_still_undoes_the_remedies_in_force():
    doctor, knobs = make_doctor(remedy_recovery_steps=50, warmup_updates=0)
    policy, probe = nn.Linear(5, 3), torch.randn(64, 5)
    doctor.set_probe(probe)
    doctor.begin_step(7)
    doctor.policy_divergence(policy, {0: lambda obs: -policy(obs)})
    doctor.observe_entropy(-100.0)
    assert doctor.metrics()['doctor/remedies_in_force'] == 2.0
    state = doctor.state_dict()
    resumed, resumed_knobs = make_doctor(remedy_recovery_steps=50, warmup_updates=0)
    resumed.load_state_dict(state)
    assert resumed.metrics()['doctor/remedies_in_force'] == 2.0
    resumed.begin_step(56)
    assert resumed_knobs.calls == []
    resumed.begin_step(57)
    assert sorted(resumed_knobs.calls) == [('scale_policy_regularization', pytest.approx(1 / 1.5)),
                                           ('scale_temperature', pytest.approx(1 / 1.1))]
    assert resumed.metrics()['doctor/remedies_in_force'] == 0.0
    bad_knob = copy.deepcopy(state)
    bad_knob['remedies']['applied']['exploration'][0]['knob'] = 'os.system'
    with pytest.raises(ValueError, match="exploration.*unknown knob 'os.system'"):
        make_doctor()[0].load_state_dict(bad_knob)
    for factor in (0.0, -1.0, float('nan'), float('inf')):
        bad_factor = copy.deepcopy(state)
        bad_factor['remedies']['applied']['exploration'][0]['factor'] = factor
        with pytest.raises(ValueError, match='exploration.*must be finite and > 0'):
            make_doctor()[0].load_state_dict(bad_factor)


def test_auto_remedy_off_only_reports():
    doctor, knobs = make_doctor(auto_remedy=False)
    assert not doctor.observe_entropy(-100.0)
    assert not doctor.observe_lag([1000])
    assert knobs.calls == []
    assert [e.remedy for e in doctor.events] == [None, None]
    assert 'suggested remedy scale_temperature(1.1)' in doctor.events[0].reason
    assert doctor.metrics()['doctor/remedies_total'] == 0.0


def test_missing_knob_is_reported_not_fatal():
    class LrOnly:

        def scale_learning_rate(self, factor):
            return None

    doctor = Doctor(knobs=LrOnly())
    assert not doctor.observe_entropy(-100.0)
    assert doctor.events[-1].remedy is None
    assert 'unavailable' in doctor.events[-1].reason
    assert not doctor.observe_lag([1000])
    assert doctor.events[-1].remedy == 'scale_learning_rate(0.8)'


# ---------------------------------------------------------------------- healthy run
def test_healthy_training_fires_nothing(caplog):
    doctor, knobs = make_doctor(reward_min_samples=100)
    model, log_alpha, opt = tiny_learner()
    x = torch.randn(16, 4)
    rng = np.random.default_rng(3)
    doctor.set_probe(torch.randn(32, 4))
    with caplog.at_level(logging.WARNING, logger='async_rl_ros.core.learning.doctor'):
        for step in range(20):
            doctor.begin_step(step)
            assert doctor.batch_ok({'obs': x, 'reward': rng.normal(size=16)})
            assert good_step(model, log_alpha, opt, doctor, x)
            doctor.remember({'m': model}, {'o': opt}, {'a': log_alpha})
            assert doctor.publish_ok(model)
            assert doctor.observe_update_ratio(5e-4, 'actor')
            for worker in range(3):
                assert doctor.observe_rewards(worker, rng.normal(-1.0, 0.5, 50))
            cos = doctor.policy_divergence(model, {0: model, 1: model})
            assert min(cos.values()) == pytest.approx(1.0)
            assert doctor.observe_entropy(-3.0)
            assert doctor.observe_lag(rng.integers(0, 10, 32))
    assert doctor.events == [] and knobs.calls == [] and caplog.records == []
    metrics = doctor.metrics()
    for key in ('doctor/nan_skips', 'doctor/update_ratio', 'doctor/min_policy_cosine',
                'doctor/entropy', 'doctor/policy_lag', 'doctor/events_total',
                'doctor/reward_scale_ratio'):
        assert key in metrics, key
    assert metrics['doctor/events_total'] == 0.0 and metrics['doctor/nan_skips'] == 0.0
    assert metrics['doctor/reward_scale_ratio'] < 3.0
