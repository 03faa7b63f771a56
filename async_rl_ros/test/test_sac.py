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

"""Tests of the SAC networks and learner (tiny networks, CPU, a few seconds in all)."""

from __future__ import annotations

import copy
import math

from async_rl_ros.core.config import ConfigError
from async_rl_ros.core.learning import networks
from async_rl_ros.core.learning.networks import (Actor, inverted_dropout, PolicyForExport,
                                                 TwinQ)
from async_rl_ros.core.learning.resume import check_finite
from async_rl_ros.core.learning.sac import POLICY_REG_BASE, SAC, SACConfig
from async_rl_ros.core.learning.step_guard import finite_guard
from async_rl_ros.core.learning.update_graph import replay_in_python, UpdateGraphs
import pytest
import torch
from torch import distributions as D

torch.set_num_threads(1)

OBS, ACT = 5, 3
TINY = {'device': 'cpu', 'hidden_sizes': [32, 32], 'critic_dropout': 0.0}  # deterministic Q

EXPECTED_METRICS = {'losses/qf1_loss', 'losses/qf2_loss', 'losses/qf1_values',
                    'losses/actor_loss', 'losses/alpha', 'losses/alpha_loss', 'losses/entropy',
                    'losses/grad_norm_critic', 'losses/grad_norm_actor', 'doctor/skipped'}


def make_sac(seed: int = 0, **overrides) -> SAC:
    """Build a tiny CPU SAC with some configuration keys changed."""
    torch.manual_seed(seed)
    return SAC(OBS, ACT, SACConfig.from_flat({**TINY, **overrides}))


def make_batch(size: int = 16, seed: int = 1, terminated: float | None = None) -> dict:
    """Return a random batch; ``terminated`` forces every flag when given."""
    gen = torch.Generator().manual_seed(seed)
    done = (torch.rand(size, generator=gen) < 0.3).float()
    return {'obs': torch.randn(size, OBS, generator=gen),
            'action': torch.rand(size, ACT, generator=gen) * 2 - 1,
            'reward': torch.randn(size, generator=gen),
            'next_obs': torch.randn(size, OBS, generator=gen),
            'terminated': done if terminated is None else torch.full((size,), terminated)}


def snapshot(module: torch.nn.Module) -> list[torch.Tensor]:
    """Copy every parameter of a module."""
    return [p.detach().clone() for p in module.parameters()]


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    """Tell whether two parameter lists are exactly equal."""
    return all(torch.equal(x, y) for x, y in zip(a, b))


# ---------------------------------------------------------------------- configuration
def test_config_defaults_and_validation():
    cfg = SACConfig()
    cfg.validate()
    assert cfg.hidden == (128, 128)
    assert cfg.target_entropy(6) == -6.0
    assert SACConfig.from_flat({'hidden_sizes': [64.0, 32.0]}).hidden == (64, 32)
    for bad in ({'hidden_sizes': [1.5]}, {'hidden_sizes': []}, {'tau': 0.0},
                {'compile': 'yes'}, {'device': 'tpu'}, {'gamma': 1.5}):
        with pytest.raises(ConfigError):
            SACConfig.from_flat(bad)


# ---------------------------------------------------------------------- networks
def test_actor_shapes_and_ranges():
    torch.manual_seed(0)
    actor = Actor(OBS, ACT, (32, 32))
    obs = 100.0 * torch.randn(64, OBS)  # large inputs drive tanh into saturation
    action, log_prob, det = actor.sample(obs)
    assert action.shape == (64, ACT) and log_prob.shape == (64,) and det.shape == (64, ACT)
    assert action.abs().max() <= 1.0 and det.abs().max() <= 1.0
    assert torch.isfinite(log_prob).all()
    mean, log_std = actor(obs)
    assert log_std.min() >= -5.0 and log_std.max() <= 2.0
    assert torch.equal(det, torch.tanh(mean))
    assert torch.equal(actor.act(obs, deterministic=True), det)
    assert actor.act(obs[0]).shape == (ACT,)


def test_tanh_log_prob_matches_torch_distributions():
    torch.manual_seed(0)
    actor = Actor(OBS, ACT, (32, 32)).double()
    obs = 3.0 * torch.randn(256, OBS, dtype=torch.float64)
    noise = torch.randn(256, ACT, dtype=torch.float64)
    action, log_prob, _ = actor.sample(obs, noise)
    mean, log_std = actor(obs)
    pre_tanh = mean + log_std.exp() * noise
    base = D.Normal(mean, log_std.exp())
    expected = (base.log_prob(pre_tanh)
                - D.TanhTransform().log_abs_det_jacobian(pre_tanh, action)).sum(-1)
    torch.testing.assert_close(log_prob, expected)
    # Independent check of the Jacobian term: central finite differences of tanh, on the rows
    # far enough from saturation for the difference not to underflow.
    h = 1e-6
    slope = (torch.tanh(pre_tanh + h) - torch.tanh(pre_tanh - h)) / (2 * h)
    rows = (pre_tanh.abs() < 5.0).all(dim=-1)
    assert rows.sum() > 100
    numeric = (base.log_prob(pre_tanh) - torch.log(slope)).sum(-1)
    torch.testing.assert_close(log_prob[rows], numeric[rows], rtol=1e-6, atol=1e-6)


def test_twin_q_matches_two_separate_mlps():
    torch.manual_seed(0)
    critic = TwinQ(OBS, ACT, (16, 8))
    obs, act = torch.randn(10, OBS), torch.rand(10, ACT) * 2 - 1
    q1, q2 = critic(obs, act)
    assert q1.shape == q2.shape == (10,)
    x = torch.cat([obs, act], -1)
    for i, q in enumerate((q1, q2)):
        h = x
        for layer in critic.layers:
            h = torch.relu(h @ layer.weight[i] + layer.bias[i])
        torch.testing.assert_close(q, (h @ critic.out.weight[i] + critic.out.bias[i])[:, 0])
    assert not torch.allclose(q1, q2)  # independent initializations


def test_layer_norm_critic_normalizes_every_hidden_layer():
    torch.manual_seed(0)
    critic = TwinQ(OBS, ACT, (16, 8), layer_norm=True)
    with torch.no_grad():
        for norm in critic.norms:  # non-trivial per-member gains and biases
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.uniform_(-0.5, 0.5)
    obs, act = 50.0 * torch.randn(10, OBS), torch.rand(10, ACT) * 2 - 1
    q1, q2 = critic(obs, act)
    x = torch.cat([obs, act], -1)
    for i, q in enumerate((q1, q2)):
        h = x
        for layer, norm in zip(critic.layers, critic.norms):
            z = h @ layer.weight[i] + layer.bias[i]
            var = z.var(-1, unbiased=False, keepdim=True)
            z = (z - z.mean(-1, keepdim=True)) / torch.sqrt(var + 1e-5)
            h = torch.relu(z * norm.weight[i] + norm.bias[i])
        torch.testing.assert_close(q, (h @ critic.out.weight[i] + critic.out.bias[i])[:, 0])
    # Normalized features bound Q by the output layer, whatever the input scale.
    bound = critic.out.weight.abs().sum(dim=(1, 2)) * 3 + critic.out.bias.abs().reshape(-1)
    huge = critic.q_values(1e6 * obs, act).abs()
    assert (huge.max(dim=1).values <= bound * 10).all()


def test_critic_dropout_is_random_in_training_mode_only():
    torch.manual_seed(0)
    critic = TwinQ(OBS, ACT, (64, 64), layer_norm=True, dropout=0.5)
    obs, act = torch.randn(10, OBS), torch.rand(10, ACT) * 2 - 1
    assert not torch.equal(critic.q_values(obs, act), critic.q_values(obs, act))
    critic.eval()
    assert torch.equal(critic.q_values(obs, act), critic.q_values(obs, act))
    with pytest.raises(ValueError):
        TwinQ(OBS, ACT, (8,), dropout=1.0)
    sac = make_sac(critic_dropout=0.5, critic_layer_norm=True)
    assert sac.critic.dropout == 0.5 and sac.critic.norms is not None
    assert sac.critic_target.training  # DroQ: the target critics use dropout too
    plain = make_sac(critic_layer_norm=False, critic_dropout=0.0)
    assert plain.critic.norms is None and plain.critic.dropout == 0.0
    metrics, _ = sac.update(make_batch())
    assert math.isfinite(metrics['losses/qf1_loss'])
    with pytest.raises(ConfigError):
        SACConfig.from_flat({'critic_dropout': 0.95})


@pytest.mark.parametrize('spare_sd', [8.0, -1.0])  # -1: too few gaps drawn, then extended
def test_cpu_dropout_draws_independent_bernoulli_masks(monkeypatch, spare_sd):
    monkeypatch.setattr(networks, '_SPARE_SD', spare_sd)
    torch.manual_seed(0)
    p, draws = 0.01, 400
    ones = torch.ones(2, 64, 128)
    masks = torch.stack([inverted_dropout(ones, p) for _ in range(draws)])
    kept = masks[masks != 0]
    assert torch.allclose(kept, torch.full_like(kept, 1.0 / (1.0 - p)))  # inverted scaling
    dropped = (masks == 0).float().reshape(draws, -1)
    n = dropped.numel()
    assert abs(dropped.mean().item() - p) < 4.0 * math.sqrt(p * (1 - p) / n)
    # Every position can be dropped, the last one included, and neighbours independently.
    per_position = dropped.mean(dim=0)
    assert per_position[:2000].mean() > 0.5 * p and per_position[-2000:].mean() > 0.5 * p
    pairs = (dropped[:, :-1] * dropped[:, 1:]).mean().item()
    assert pairs < 3.0 * p * p
    x = torch.randn(2, 64, 128, requires_grad=True)
    y = inverted_dropout(x, p)
    y.sum().backward()
    assert torch.equal(x.grad, torch.where(y == 0, 0.0, 1.0 / (1.0 - p)))
    assert inverted_dropout(x, p, training=False) is x and inverted_dropout(x, 0.0) is x


def test_checkpoint_of_another_critic_kind_is_refused_and_old_ones_load():
    state = make_sac(critic_layer_norm=False).state_dict()
    with pytest.raises(ValueError, match='dimensions'):
        make_sac(critic_layer_norm=True).load_state_dict(state)
    del state['dims']['critic_layer_norm']  # a checkpoint written before the option existed
    for group in state['critic_optimizer']['param_groups']:
        group['fused'] = None  # written before the optimizers used the fused kernel
    old = make_sac(seed=3, critic_layer_norm=False)
    old.load_state_dict(state)
    assert all(group['fused'] for group in old.critic_optimizer.param_groups)


@pytest.mark.filterwarnings('ignore::DeprecationWarning')  # torch >= 2.9 deprecates TorchScript
@pytest.mark.parametrize('export', ['script', 'trace', 'export'])
def test_torchscript_export_matches_actor(export):
    torch.manual_seed(0)
    actor = Actor(OBS, ACT, (32, 32))
    obs = torch.randn(8, OBS)
    mean, std = torch.randn(OBS), torch.rand(OBS) + 0.5
    policy = actor.deterministic_policy(mean, std)
    if export == 'export':  # torch.export, TorchScript's successor
        module = torch.export.export(policy, (obs,)).module()
    else:
        module = torch.jit.script(policy) if export == 'script' else torch.jit.trace(policy, obs)
    expected = actor.act((obs - mean) / std, deterministic=True)
    torch.testing.assert_close(module(obs), expected)
    identity = torch.jit.script(actor.deterministic_policy())
    torch.testing.assert_close(identity(obs), actor.act(obs, deterministic=True))
    # A worker rebuilds the policy from the shipped state dict (weights and normalization).
    worker = PolicyForExport(OBS, ACT, (32, 32))
    worker.load_state_dict(policy.state_dict())
    torch.testing.assert_close(worker(obs), expected)


def test_export_follows_actor_updates_and_clip():
    torch.manual_seed(0)
    actor = Actor(OBS, ACT, (32, 32))
    policy = actor.deterministic_policy()
    with torch.no_grad():
        actor.mean_head.bias.add_(1.0)
    obs = torch.randn(4, OBS)
    assert not torch.allclose(policy(obs), actor.act(obs, deterministic=True))
    policy.load_actor_state_dict(actor.state_dict())
    torch.testing.assert_close(policy(obs), actor.act(obs, deterministic=True))
    policy.set_normalization(None, None, obs_clip=0.5)
    torch.testing.assert_close(policy(obs), actor.act(obs.clamp(-0.5, 0.5), deterministic=True))
    with pytest.raises(ValueError):
        policy.set_normalization(None, torch.zeros(OBS))


# ---------------------------------------------------------------------- update mechanics
def test_update_metrics_and_td_abs():
    sac = make_sac()
    batch = make_batch(terminated=1.0)  # no bootstrapping: the target is the reward
    with torch.no_grad():
        q = sac.critic.q_values(batch['obs'], batch['action'])
    metrics, td_abs = sac.update(batch)
    assert EXPECTED_METRICS <= set(metrics) and 'losses/policy_reg' not in metrics
    assert all(isinstance(v, float) and math.isfinite(v) for v in metrics.values())
    assert metrics['doctor/skipped'] == 0.0
    torch.testing.assert_close(td_abs, (q - batch['reward']).abs().mean(0))
    torch.testing.assert_close(metrics['losses/qf1_loss'],
                               (q[0] - batch['reward']).pow(2).mean().item())
    assert not td_abs.requires_grad
    # Truncation is not termination: terminated = 0 bootstraps from next_obs.
    _, td_boot = make_sac().update(dict(batch, terminated=torch.zeros(16)))
    assert not torch.allclose(td_boot, td_abs)


def test_polyak_target_update():
    sac = make_sac(tau=0.3)
    old_target = snapshot(sac.critic_target)
    sac.update(make_batch())
    for new, online, old in zip(sac.critic_target.parameters(), sac.critic.parameters(),
                                old_target):
        torch.testing.assert_close(new, 0.3 * online + 0.7 * old)
    # target_network_frequency = 2 leaves the targets alone on odd steps.
    sac = make_sac(target_network_frequency=2)
    sac.update(make_batch())
    before = snapshot(sac.critic_target)
    sac.update(make_batch(seed=2))
    assert same(snapshot(sac.critic_target), before)


def test_averaged_actor_is_a_polyak_average_of_the_online_actor():
    off = make_sac(policy_average_tau=0.0)
    assert off.actor_average is None and off.evaluated_actor is off.actor
    sac = make_sac(policy_average_tau=0.25, policy_average_fraction=0.0)
    assert sac.evaluated_actor is sac.actor_average
    assert same(snapshot(sac.actor_average), snapshot(sac.actor))  # starts at the actor
    before = snapshot(sac.actor_average)
    sac.update(make_batch())
    online = snapshot(sac.actor)
    assert not same(online, before)
    for new, now, old in zip(sac.actor_average.parameters(), online, before):
        torch.testing.assert_close(new, 0.25 * now + 0.75 * old)
    assert not any(p.requires_grad for p in sac.actor_average.parameters())
    # Saved and restored; a checkpoint without an average starts it at its actor.
    state = copy.deepcopy(sac.state_dict())
    other = make_sac(seed=5, policy_average_tau=0.25, policy_average_fraction=0.0)
    other.load_state_dict(state)
    assert same(snapshot(other.actor_average), snapshot(sac.actor_average))
    other.load_state_dict({**state, 'actor_average': None})
    assert same(snapshot(other.actor_average), online)


def test_actor_average_window_grows_with_training():
    # Constant factor until 1 / tau updates are less than the fraction of the updates so far,
    # then 1 / (fraction * t), t read from the update counter (restored with a checkpoint).
    sac = make_sac(policy_average_tau=0.01, policy_average_fraction=0.5)
    assert sac.average_factor() == 0.01
    sac.num_updates = 199   # t = 200: 1 / (0.5 * 200) = 0.01, the crossover
    assert sac.average_factor() == pytest.approx(0.01)
    sac.num_updates = 999
    assert sac.average_factor() == pytest.approx(0.002)
    before = snapshot(sac.actor_average)
    sac.update(make_batch())
    for new, now, old in zip(sac.actor_average.parameters(), snapshot(sac.actor), before):
        torch.testing.assert_close(new, 0.002 * now + 0.998 * old)
    fixed = make_sac(policy_average_tau=0.01, policy_average_fraction=0.0)
    fixed.num_updates = 10**6
    assert fixed.average_factor() == 0.01


@pytest.mark.parametrize('scale, direction', [(10.0, -1), (-10.0, 1)])
def test_temperature_follows_entropy_target(scale, direction):
    # scale 10: target -30 nats, far below the entropy: alpha must fall; -10: far above: rise.
    sac = make_sac(target_entropy_scale=scale, alpha_lr=1e-2)
    alpha = sac.alpha
    for seed in range(3):
        sac.update(make_batch(seed=seed))
    assert (sac.alpha - alpha) * direction > 0


def _critic_grads(sac: SAC, batch: dict, weights: torch.Tensor) -> list[torch.Tensor]:
    grads = {}

    def capture(losses, parameters, grad_norm):
        if 'qf1_loss' in losses:
            grads['critic'] = [p.grad.clone() for p in parameters]
        return False

    torch.manual_seed(123)  # same target-policy noise for every call
    sac.update(batch, weights, guard=capture)
    return grads['critic']


def test_zero_importance_weight_removes_sample():
    sac = make_sac()
    batch = make_batch(size=2)
    other = {k: v.clone() for k, v in batch.items()}
    other['reward'][1] += 5.0
    other['obs'][1] += 1.0
    zero = torch.tensor([1.0, 0.0])
    a = _critic_grads(sac, batch, zero)
    b = _critic_grads(sac, other, zero)
    c = _critic_grads(sac, other, torch.ones(2))
    assert all(torch.allclose(x, y, atol=1e-7) for x, y in zip(a, b))
    assert not all(torch.allclose(x, y) for x, y in zip(b, c))


def test_guard_refusal_leaves_everything_unchanged():
    sac = make_sac()
    modules = (sac.actor, sac.critic, sac.critic_target)
    before = [snapshot(m) for m in modules]
    alpha = sac.log_alpha.detach().clone()
    seen = []

    def refuse(losses, parameters, grad_norm):
        seen.append(sorted(losses))
        assert all(p.grad is not None for p in parameters)
        # The norm the step would clip by, measured once: the clipped parameters' gradients
        # (the actor step also steps the temperature, which is not clipped).
        clipped = parameters if 'qf1_loss' in losses else parameters[:-1]
        expected = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in clipped]))
        assert torch.allclose(grad_norm, expected)
        return False

    metrics, _ = sac.update(make_batch(), guard=refuse)
    assert seen == [['qf1_loss', 'qf2_loss'], ['actor_loss', 'alpha_loss']]
    assert metrics['doctor/skipped'] == 1.0
    assert all(same(snapshot(m), b) for m, b in zip(modules, before))
    assert torch.equal(sac.log_alpha.detach(), alpha)
    assert sac.num_skipped == 1 and sac.num_actor_updates == 0
    assert all(p.grad is None for p in sac.critic.parameters())


def test_actor_step_differentiates_through_the_critics_not_into_them():
    sac = make_sac(grad_clip_norm=0.0)
    seen = {}

    def capture(losses, parameters, grad_norm):
        step = 'critic' if 'qf1_loss' in losses else 'actor'
        seen[step] = [p.grad.clone() for p in sac.critic.parameters()]
        if step == 'actor':  # the actor did get dQ/da through the critics
            assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in parameters)
        return True

    sac.update(make_batch(), guard=capture)
    # The critics' gradients are still those of their own step: the actor's loss added none.
    assert all(torch.equal(a, b) for a, b in zip(seen['critic'], seen['actor']))
    assert all(p.requires_grad for p in sac.critic.parameters())


def test_default_guard_skips_non_finite_steps():
    sac = make_sac()
    assert sac.guard is finite_guard
    critic = snapshot(sac.critic)
    batch = make_batch()
    batch['reward'][3] = float('nan')  # poisons the critic loss only
    metrics, _ = sac.update(batch)
    assert metrics['doctor/skipped'] == 1.0
    assert same(snapshot(sac.critic), critic)
    assert sac.num_actor_updates == 1  # the actor step did not depend on the reward
    everything = [snapshot(m) for m in (sac.actor, sac.critic, sac.critic_target)]
    batch = make_batch()
    batch['obs'][0, 0] = float('inf')
    metrics, _ = sac.update(batch)
    assert metrics['doctor/skipped'] == 1.0
    assert all(same(snapshot(m), b) for m, b in
               zip((sac.actor, sac.critic, sac.critic_target), everything))
    metrics, _ = sac.update(make_batch())
    assert metrics['doctor/skipped'] == 0.0
    # Finite losses, a non-finite gradient: judged by the gradient norm, the step is skipped.
    weight = sac.critic.out.weight
    hook = weight.register_hook(lambda grad: grad * float('nan'))
    critic = snapshot(sac.critic)
    metrics, _ = sac.update(make_batch())
    hook.remove()
    assert metrics['doctor/skipped'] == 1.0 and math.isnan(metrics['losses/grad_norm_critic'])
    assert same(snapshot(sac.critic), critic)


def test_policy_frequency_delays_and_repeats_actor_steps():
    sac = make_sac(policy_frequency=2)
    first, _ = sac.update(make_batch(seed=1))
    assert sac.num_actor_updates == 2
    actor = snapshot(sac.actor)
    second, _ = sac.update(make_batch(seed=2))
    assert same(snapshot(sac.actor), actor) and sac.num_actor_updates == 2
    # Between actor steps the metrics repeat those of the last actor step.
    assert EXPECTED_METRICS <= set(second)
    assert second['losses/entropy'] == first['losses/entropy']
    assert second['losses/qf1_loss'] != first['losses/qf1_loss']
    sac.update(make_batch(seed=3))
    assert sac.num_actor_updates == 4


# ---------------------------------------------------------------------- doctor knobs
def test_knobs():
    sac = make_sac()
    sac.scale_learning_rate(0.5)
    lrs = [g['lr'] for o in (sac.actor_optimizer, sac.critic_optimizer, sac.alpha_optimizer)
           for g in o.param_groups]
    assert lrs == pytest.approx([1.5e-4] * 3)
    alpha = sac.alpha
    sac.scale_temperature(2.0)
    assert sac.alpha == pytest.approx(2 * alpha)
    assert sac.policy_reg_weight == 0.0
    assert sac.scale_policy_regularization(2.0) == pytest.approx(2 * POLICY_REG_BASE)
    sac.scale_policy_regularization(1.5)
    assert sac.policy_reg_weight == pytest.approx(3 * POLICY_REG_BASE)
    # The doctor undoes its remedies with the inverse factors: the term is off again.
    sac.scale_policy_regularization(1 / 1.5)
    sac.scale_policy_regularization(0.5)
    assert sac.policy_reg_weight == 0.0 and sac.policy_reg.scale == 1.0
    configured = make_sac(policy_reg_weight=0.4)
    configured.scale_policy_regularization(1.5)
    assert configured.policy_reg_weight == pytest.approx(0.6)
    configured.scale_policy_regularization(1 / 1.5)
    assert configured.policy_reg_weight == 0.4
    configured.scale_policy_regularization(0.0)
    assert configured.policy_reg_weight == 0.0
    with pytest.raises(ValueError):
        sac.scale_learning_rate(0.0)
    with pytest.raises(ValueError):
        sac.scale_temperature(float('nan'))


def test_policy_regularization_pulls_towards_reference():
    sac = make_sac(policy_reg_weight=1.0, actor_lr=1e-2)
    metrics, _ = sac.update(make_batch())
    assert 'losses/policy_reg' not in metrics  # no reference yet
    sac.set_reference_policy(sac.actor.state_dict())
    metrics, _ = sac.update(make_batch(seed=2))
    assert metrics['losses/policy_reg'] == pytest.approx(0.0, abs=1e-10)
    # A far-away reference: a strong pull moves the mean actions towards it.
    reference = copy.deepcopy(sac.actor)
    with torch.no_grad():
        reference.mean_head.bias.fill_(2.0)
    sac.set_reference_policy(reference.deterministic_policy().state_dict())
    sac.scale_policy_regularization(100.0)
    batch = make_batch(seed=3)
    first, _ = sac.update(batch)
    for _ in range(20):
        last, _ = sac.update(batch)
    assert last['losses/policy_reg'] < 0.5 * first['losses/policy_reg']
    # A checkpoint holding the reference passes the resume check (no weight is inf).
    check_finite({'sac': sac.state_dict()})
    sac.set_reference_policy(None)
    assert 'losses/policy_reg' not in sac.update(batch)[0]


def test_smoothness_term_brings_consecutive_mean_actions_together():
    batch = make_batch(seed=4)

    def gap(sac: SAC) -> float:
        with torch.no_grad():
            now = sac.actor.act(batch['obs'], deterministic=True)
            nxt = sac.actor.act(batch['next_obs'], deterministic=True)
        return (now - nxt).pow(2).sum(-1).mean().item()

    plain = make_sac(actor_lr=1e-2, smoothness_weight=0.0)
    assert 'losses/action_smoothness' not in plain.update(batch)[0]
    smooth = make_sac(actor_lr=1e-2, smoothness_weight=100.0)
    first, _ = smooth.update(batch)
    # The metric is the gap of the mean actions before that step.
    assert first['losses/action_smoothness'] == pytest.approx(gap(make_sac()), rel=1e-5)
    # With the doctor's policy regularization active too, the smoothness term still counts.
    both = make_sac(actor_lr=1e-2, smoothness_weight=100.0, policy_reg_weight=1e-3)
    both.set_reference_policy(both.actor.state_dict())
    for _ in range(30):
        plain.update(batch)
        smooth.update(batch)
        both.update(batch)
    assert gap(smooth) < 0.2 * gap(plain)
    assert gap(both) < 0.2 * gap(plain)


def test_state_dict_round_trip_resumes_identically():
    sac = make_sac(policy_frequency=2)
    for seed in range(3):
        sac.update(make_batch(seed=seed))
    sac.scale_learning_rate(0.5)
    sac.scale_policy_regularization(1.5)
    sac.set_reference_policy(sac.actor.state_dict())
    state = copy.deepcopy(sac.state_dict())
    other = make_sac(seed=99, policy_frequency=2)
    other.load_state_dict(state)
    assert other.num_updates == 3
    assert other.policy_reg_weight == pytest.approx(1.5 * POLICY_REG_BASE)
    assert other.policy_reg.scale == pytest.approx(1.5) and other.reference_active
    for run in (sac, other):
        torch.manual_seed(7)
        run.update(make_batch(seed=10))
    for a, b in ((sac.actor, other.actor), (sac.critic, other.critic),
                 (sac.critic_target, other.critic_target)):
        assert same(snapshot(a), snapshot(b))
    assert torch.equal(sac.log_alpha, other.log_alpha)
    with pytest.raises(ValueError):
        SAC(OBS + 1, ACT, SACConfig.from_flat(TINY)).load_state_dict(state)


def test_a_loaded_state_is_copied_not_shared():
    """Two SACs loaded from one state dict train apart; the dict itself stays as saved."""
    sac = make_sac()
    for seed in range(2):
        sac.update(make_batch(seed=seed))
    state = sac.state_dict()
    saved = copy.deepcopy(state)
    first, second = make_sac(seed=3), make_sac(seed=4)
    first.load_state_dict(state)
    second.load_state_dict(state)
    moments = copy.deepcopy(second.critic_optimizer.state_dict())
    first.update(make_batch(seed=5))
    for name in ('actor_optimizer', 'critic_optimizer', 'alpha_optimizer'):
        for slot, values in saved[name]['state'].items():
            for key, value in values.items():
                assert torch.equal(state[name]['state'][slot][key], value), (name, key)
    for slot, values in moments['state'].items():
        for key, value in values.items():
            assert torch.equal(second.critic_optimizer.state_dict()['state'][slot][key], value)


def test_a_checkpoint_that_saved_the_regularization_weight_still_resumes():
    """Older checkpoints hold ``policy_reg_weight`` and ``reference_policy``, not the scale."""
    sac = make_sac()
    sac.scale_policy_regularization(1.5)
    sac.scale_policy_regularization(1.5)
    sac.set_reference_policy(sac.actor.state_dict())
    state = copy.deepcopy(sac.state_dict())
    reg = state.pop('policy_reg')
    state.update(policy_reg_weight=reg['weight'], reference_policy=reg['reference'])
    other = make_sac(seed=5)
    other.load_state_dict(state)
    assert other.policy_reg.scale == pytest.approx(2.25) and other.reference_active
    other.scale_policy_regularization(1 / 1.5)
    other.scale_policy_regularization(1 / 1.5)
    assert other.policy_reg_weight == 0.0


# ---------------------------------------------------------------------- learning
def test_learns_contextual_bandit():
    """Reward -||a - f(obs)||^2 from random actions: the greedy action must approach f."""
    sac = make_sac(hidden_sizes=[64, 64], actor_lr=1e-3, critic_lr=1e-3, alpha_lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    weights = torch.tensor([[1.0, -0.5, 0.3, 0.0, 0.2], [-0.4, 0.8, 0.6, 0.1, 0.0],
                            [0.2, 0.2, -0.7, 0.5, 0.3]])

    def best(obs):
        return 0.6 * torch.tanh(obs @ weights.T)

    obs = torch.rand(2048, OBS, generator=gen) * 2 - 1
    action = torch.rand(2048, ACT, generator=gen) * 2 - 1
    reward = -(action - best(obs)).pow(2).sum(-1)
    test = torch.rand(512, OBS, generator=gen) * 2 - 1
    initial = (sac.actor.act(test, True) - best(test)).abs().mean().item()
    for _ in range(600):
        idx = torch.randint(0, 2048, (128,), generator=gen)
        sac.update({'obs': obs[idx], 'action': action[idx], 'reward': reward[idx],
                    'next_obs': obs[idx], 'terminated': torch.ones(128)})
    error = (sac.actor.act(test, True) - best(test)).abs().mean().item()
    assert error < 0.06 and error < 0.3 * initial, (initial, error)


# ---------------------------------------------------------------------- CUDA paths
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason='needs a CUDA device')


def _sized_batch(step: int, size: int = 256, device: str = 'cuda'
                 ) -> tuple[dict, torch.Tensor]:
    gen = torch.Generator().manual_seed(step)
    batch = {'obs': torch.randn(size, 21, generator=gen),
             'action': torch.rand(size, 6, generator=gen) * 2 - 1,
             'reward': torch.randn(size, generator=gen),
             'next_obs': torch.randn(size, 21, generator=gen),
             'terminated': (torch.rand(size, generator=gen) < 0.1).float()}
    weights = torch.rand(size, generator=gen)
    return {k: v.to(device) for k, v in batch.items()}, weights.to(device)


def _all_tensors(sac: SAC) -> list[torch.Tensor]:
    return [t.detach().cpu() for m in (sac.actor, sac.critic, sac.critic_target,
                                       sac.actor_average) for t in m.parameters()]


def _assert_same_update(a: tuple, b: tuple, what: str) -> None:
    (m_a, td_a), (m_b, td_b) = a, b
    assert m_a.keys() == m_b.keys(), what
    for key in m_a:
        assert m_b[key] == pytest.approx(m_a[key], rel=1e-4, abs=1e-5, nan_ok=True), (what, key)
    torch.testing.assert_close(td_b.cpu(), td_a.cpu(), rtol=1e-4, atol=1e-5, equal_nan=True)


def test_compile_and_cuda_graph_are_one_choice():
    with pytest.raises(ConfigError, match=r"compile = 'auto'.*cuda_graph"):
        SACConfig.from_flat({'compile': 'auto'})
    assert SACConfig.from_flat({'compile': 'auto', 'cuda_graph': False}).compile == 'auto'


@CUDA
def test_compiled_matches_eager(monkeypatch):
    # Inductor draws dropout masks with its own generator unless told to use eager's.
    monkeypatch.setattr(torch._inductor.config, 'fallback_random', True)
    runs = {}
    for mode in ('off', 'on'):
        torch.manual_seed(0)
        sac = SAC(21, 6, SACConfig.from_flat({'device': 'cuda', 'compile': mode,
                                              'cuda_graph': False}))
        assert sac.compiled == (mode == 'on') and sac.graphs is None
        history = []
        for step in range(5):
            batch, weights = _sized_batch(step)
            torch.manual_seed(100 + step)
            history.append(sac.update(batch, weights))
        runs[mode] = (history, _all_tensors(sac))
    for step, (eager, compiled) in enumerate(zip(runs['off'][0], runs['on'][0])):
        _assert_same_update(eager, compiled, f'update {step}')
    for a, b in zip(runs['off'][1], runs['on'][1]):
        torch.testing.assert_close(b, a, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize('device, flat', [
    ('cpu', {}),
    # delayed actor and target updates: updates without an actor step are a graph of their own
    ('cpu', {'policy_frequency': 2, 'target_network_frequency': 3}),
    pytest.param('cuda', {}, marks=CUDA)])
def test_the_graphed_update_is_the_eager_update(device, flat):
    """
    Replayed graphs compute what eager updates compute, through what breaks a graph.

    Between updates: a learning rate change (baked into the graph), a non-finite batch (undone
    and redone eagerly, so only the critic step is skipped), a new batch size (a new graph) and
    a checkpoint load (new optimizer tensors): each must lead to the same state as eager. On
    the CPU the update is "recorded" as a Python call (every rule but the capture itself).
    """
    sacs = {}
    for graphed in (False, True):
        torch.manual_seed(0)
        sacs[graphed] = SAC(21, 6, SACConfig.from_flat({'device': device,
                                                        'cuda_graph': graphed, **flat}))
    eager, graph = sacs[False], sacs[True]
    if device == 'cpu':
        assert graph.graphs is None  # CPU learners run eager
        graph.graphs = UpdateGraphs(graph.device, graph._graph_state, graph._graph_settings,
                                    recorder=replay_in_python)
    assert eager.graphs is None and graph.graphs is not None
    saved = None
    for step in range(16):
        size = 128 if 9 <= step < 12 else 256
        batch, weights = _sized_batch(step, size, device)
        if step == 8:
            batch['reward'][5] = float('nan')  # poisons the critic step only
        if step == 6:
            for sac in sacs.values():
                sac.scale_learning_rate(0.5)
        if step == 4:
            saved = copy.deepcopy(eager.state_dict())
        if step == 13:
            for sac in sacs.values():  # each its own copy: optimizers keep the loaded tensors
                sac.load_state_dict(copy.deepcopy(saved))
        results = []
        for sac in (eager, graph):
            torch.manual_seed(1000 + step)
            results.append(sac.update(batch, weights))
        _assert_same_update(*results, f'update {step}')
        if step == 8:
            assert results[1][0]['doctor/skipped'] == 1.0
        for a, b in zip(_all_tensors(eager), _all_tensors(graph)):
            torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
    assert (eager.num_updates, eager.num_skipped, eager.num_actor_updates) == (
        graph.num_updates, graph.num_skipped, graph.num_actor_updates)
    # Captured: 256, 256 again after the learning rate change, 128, 256 after the load. With
    # delayed actor steps the two kinds of update warm up in turn: fewer captures in 16 steps.
    assert graph.graphs.captures == 4 if not flat else graph.graphs.captures >= 2
