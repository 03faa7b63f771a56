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

"""
Soft Actor-Critic learner with automatic temperature.

Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications" (arXiv:1812.05905),
with clipped double Q (Fujimoto et al. 2018, "Addressing Function Approximation Error in
Actor-Critic Methods"). One :meth:`SAC.update` is one gradient step of the critics, then (every
``policy_frequency`` steps) of the actor and the temperature, then the Polyak updates of the
target critics and (optional) of the averaged actor that the evaluator scores.
The actor loss may add a temporal smoothness term on consecutive states (Mysore et al. 2021,
"Regularizing Action Policies for Smooth Control with Reinforcement Learning", CAPS) and the
pull towards a policy version the workers act with (:mod:`.policy_reg`).

Conventions:

* a batch is ``{'obs', 'action', 'reward', 'next_obs', 'terminated'}`` of tensors already on
  :attr:`SAC.device`; ``terminated`` is 1.0 only where the MDP really ended. A time-limit
  truncation is *not* a termination: the target still bootstraps from ``next_obs``;
* importance weights (prioritized replay) multiply each sample's squared TD error; pass them
  normalized (e.g. divided by their maximum);
* the returned ``td_abs`` is the mean over the two critics of ``|Q_i(s, a) - y|``, detached.

:meth:`SAC.update` does no I/O. Eagerly it synchronizes with the device once for its metrics
and once per optimizer step when a guard is installed (a guard returns a Python bool; see
:mod:`.step_guard`). On CUDA with ``cuda_graph`` the whole update is one replayed graph
(:mod:`.update_graph`) and one synchronization reads its metrics and its finite-step verdict
together.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
from typing import Any, Callable, Iterator, Mapping, Sequence
import warnings

from async_rl_ros.core.config import ConfigError, SACConfig
from async_rl_ros.core.learning.networks import Actor, TwinQ
from async_rl_ros.core.learning.policy_reg import POLICY_REG_BASE, PolicyRegularization
from async_rl_ros.core.learning.sac_knobs import SACKnobs
from async_rl_ros.core.learning.sac_policies import SACPolicies
from async_rl_ros.core.learning.sac_state import SACState
from async_rl_ros.core.learning.step_guard import (all_finite, finite_guard, FiniteGuard,
                                                   fused_adam, Guard, guarded_step)
from async_rl_ros.core.learning.update_graph import UpdateGraphs
import torch
from torch import nn

__all__ = ['POLICY_REG_BASE', 'UPDATE_METRICS', 'SACConfig', 'SAC', 'resolve_device']

#: Every metric :meth:`SAC.update` reports (``losses/policy_reg`` only with a reference
#: policy, ``losses/action_smoothness`` only with ``smoothness_weight > 0``), known before the
#: first update: a metric sink can announce them up front.
UPDATE_METRICS = ('losses/qf1_loss', 'losses/qf2_loss', 'losses/qf1_values',
                  'losses/grad_norm_critic', 'losses/alpha', 'losses/actor_loss',
                  'losses/alpha_loss', 'losses/entropy', 'losses/grad_norm_actor',
                  'losses/policy_reg', 'losses/action_smoothness', 'doctor/skipped')


def resolve_device(name: str) -> torch.device:
    """
    Turn ``'auto' | 'cpu' | 'cuda'`` into a device.

    :param name: the configured device.
    :returns: CUDA for ``'auto'`` when available, else CPU.
    """
    if name == 'auto':
        return torch.device('cuda' if torch.cuda.is_available() else 'cpu')
    if name == 'cuda' and not torch.cuda.is_available():
        raise ConfigError('learner.sac.device', name,
                          'a device that exists: auto or cpu (CUDA is not available here)')
    return torch.device(name)


def _scalars(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """Stack 0-d tensors into one float vector: one device read for all of them."""
    return torch.stack([t.float().reshape(()) for t in tensors])


@dataclasses.dataclass
class _Body:
    """What one update computed: metric tensors, ``|TD|`` and what its steps did."""

    tensors: dict[str, torch.Tensor]
    td_abs: torch.Tensor
    #: Every loss and gradient norm the guard judges (a CUDA graph reports their finiteness).
    checks: list[torch.Tensor]
    critic_ok: bool
    actor_ok: list[bool] = dataclasses.field(default_factory=list)
    actor_keys: list[str] = dataclasses.field(default_factory=list)


class SAC(SACKnobs, SACPolicies, SACState):
    """
    Actor, twin critics, target critics, temperature and their optimizers.

    Its resumable state is :meth:`state_dict` and :meth:`load_state_dict`
    (:class:`~.sac_state.SACState`); the doctor's knobs are :class:`~.sac_knobs.SACKnobs`;
    the policies it hands out are :class:`~.sac_policies.SACPolicies`.

    :param obs_dim: observation width (observations arrive normalized).
    :param act_dim: action width; actions lie in [-1, 1].
    :param cfg: hyper-parameters; defaults when omitted.
    :param guard: called after each backward and before the optimizer step with the step's
        losses and parameters; returning False skips the step. ``None`` disables the check.
    """

    def __init__(self, obs_dim: int, act_dim: int, cfg: SACConfig | None = None,
                 guard: Guard | None = finite_guard):
        cfg = cfg if cfg is not None else SACConfig()
        cfg.validate()
        self.cfg = cfg
        self.obs_dim, self.act_dim = int(obs_dim), int(act_dim)
        self.device = resolve_device(cfg.device)
        self.guard = guard
        self.actor = Actor(obs_dim, act_dim, cfg.hidden).to(self.device)
        self.critic = TwinQ(obs_dim, act_dim, cfg.hidden, layer_norm=cfg.critic_layer_norm,
                            dropout=cfg.critic_dropout).to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        #: Polyak average of the actor (``policy_average_tau > 0``), the policy a user gets.
        self.actor_average: Actor | None = (
            copy.deepcopy(self.actor).requires_grad_(False) if cfg.policy_average_tau > 0
            else None)
        self.log_alpha = torch.tensor(math.log(cfg.init_alpha), device=self.device,
                                      requires_grad=True)
        self.target_entropy = cfg.target_entropy(act_dim)
        self.compiled = (cfg.compile != 'off' and self.device.type == 'cuda'
                         and hasattr(torch, 'compile'))
        graphed = cfg.cuda_graph and self.device.type == 'cuda' and not self.compiled
        self.actor_optimizer = fused_adam(list(self.actor.parameters()), cfg.actor_lr, graphed)
        self.critic_optimizer = fused_adam(list(self.critic.parameters()), cfg.critic_lr, graphed)
        self.alpha_optimizer = fused_adam([self.log_alpha], cfg.alpha_lr, graphed)
        #: The pull towards a policy version the workers act with (:mod:`.policy_reg`).
        self.policy_reg = PolicyRegularization(obs_dim, act_dim, cfg.hidden, self.device,
                                               cfg.policy_reg_weight)
        self.num_updates = 0
        self.num_actor_updates = 0
        self.num_skipped = 0
        self._actor_metrics: dict[str, float] = {}
        #: The update replayed as CUDA graphs (``cuda_graph`` on a CUDA device), else ``None``.
        self.graphs = (UpdateGraphs(self.device, self._graph_state, self._graph_settings)
                       if graphed else None)
        self._critic_fn: Callable[..., Any] = self._critic_losses
        self._actor_fn: Callable[..., Any] = self._actor_losses
        if self.compiled:
            self._critic_fn = torch.compile(self._critic_losses, mode=cfg.compile_mode)
            self._actor_fn = torch.compile(self._actor_losses, mode=cfg.compile_mode)

    # ------------------------------------------------------------------ losses (pure tensors)
    def _critic_losses(self, obs: torch.Tensor, action: torch.Tensor, reward: torch.Tensor,
                       next_obs: torch.Tensor, terminated: torch.Tensor, weights: torch.Tensor,
                       noise: torch.Tensor) -> tuple[torch.Tensor, ...]:
        with torch.no_grad():
            next_action, next_log_prob, _ = self.actor.sample(next_obs, noise)
            # Clipped double Q: the smaller target critic (Fujimoto et al. 2018).
            next_q = self.critic_target.q_values(next_obs, next_action).min(dim=0).values
            # Soft value V(s') = Q(s', a') - alpha log pi(a'|s') (Haarnoja et al. 2018, eq. 3).
            soft_value = next_q - self.log_alpha.exp() * next_log_prob
            target = reward + self.cfg.gamma * (1.0 - terminated) * soft_value
        q = self.critic.q_values(obs, action)  # (2, B)
        td = q - target
        per_q_loss = (weights * td.pow(2)).mean(dim=1)  # importance-weighted MSE of each critic
        td_abs = td.detach().abs().mean(dim=0)
        return per_q_loss.sum(), per_q_loss[0], per_q_loss[1], q[0].detach().mean(), td_abs

    def _actor_losses(self, obs: torch.Tensor, next_obs: torch.Tensor, noise: torch.Tensor,
                      reg_weight: torch.Tensor, use_reg: bool) -> tuple[torch.Tensor, ...]:
        action, log_prob, mean_action = self.actor.sample(obs, noise)
        q = self.critic.q_values(obs, action).min(dim=0).values
        # Policy loss E[alpha log pi(a|s) - Q(s, a)] (Haarnoja et al. 2018, eq. 7).
        actor_loss = (self.log_alpha.detach().exp() * log_prob - q).mean()
        total = actor_loss
        smooth = torch.zeros((), device=obs.device)
        if self.cfg.smoothness_weight > 0.0:
            # Temporal smoothness of the mean action between consecutive states (CAPS,
            # Mysore et al. 2021, L_T; squared here): a velocity-commanded arm otherwise learns
            # a bang-bang hold that flips the command every step at the target.
            next_mean = torch.tanh(self.actor(next_obs)[0])
            smooth = (mean_action - next_mean).pow(2).sum(dim=-1).mean()
            total = total + self.cfg.smoothness_weight * smooth
        reg = torch.zeros((), device=obs.device)
        if use_reg:
            reg = self.policy_reg.loss(obs, mean_action)
            total = total + reg_weight * reg
        # Temperature loss E[-alpha (log pi + target entropy)] (Haarnoja et al. 2018, eq. 18).
        alpha_loss = -(self.log_alpha.exp() * (log_prob.detach() + self.target_entropy)).mean()
        return total, actor_loss, alpha_loss, -log_prob.detach().mean(), reg, smooth.detach()

    def _call(self, name: str, *args: Any) -> tuple[torch.Tensor, ...]:
        """Run a loss function, compiled when enabled; 'auto' falls back to eager on failure."""
        fn = self._critic_fn if name == 'critic' else self._actor_fn
        try:
            return fn(*args)
        except Exception as exc:  # noqa: B902 -- any compiler failure
            if not self.compiled or self.cfg.compile != 'auto':
                raise
            warnings.warn(f'torch.compile failed ({exc!r}); SAC falls back to eager')
            self.compiled = False
            self._critic_fn, self._actor_fn = self._critic_losses, self._actor_losses
            return self._call(name, *args)

    # ------------------------------------------------------------------ update
    def update(self, batch: Mapping[str, torch.Tensor], weights: torch.Tensor | None = None,
               guard: Guard | None = None) -> tuple[dict[str, float], torch.Tensor]:
        """
        Take one SAC gradient step on a batch.

        On CUDA with ``cuda_graph`` the update is replayed as one CUDA graph
        (:mod:`.update_graph`) when the guard is a :class:`FiniteGuard` (or ``None``); any other
        guard needs Python between the steps and runs eagerly. The result is the eager one.

        :param batch: ``obs``, ``action``, ``reward``, ``next_obs`` and ``terminated`` (0/1
            float) tensors on :attr:`device`, with batch size B as leading dimension.
        :param weights: per-sample importance weights of shape ``(B,)``; ``None`` means 1.
        :param guard: overrides :attr:`guard` for this call.
        :returns: ``(metrics, td_abs)``: scalar metrics (``losses/...``, ``doctor/skipped``)
            and the detached per-sample ``|TD|`` of shape ``(B,)`` for priority updates.
        """
        guard = guard if guard is not None else self.guard
        obs = batch['obs']
        inputs = (obs, batch['action'], batch['reward'].reshape(-1).to(obs.dtype),
                  batch['next_obs'], batch['terminated'].reshape(-1).to(obs.dtype),
                  torch.ones(obs.shape[0], device=obs.device) if weights is None
                  else weights.reshape(-1).to(obs.dtype))
        actor_step = self.num_updates % self.cfg.policy_frequency == 0
        use_reg = actor_step and self.reference_active
        target_weight = (self.cfg.tau if self.num_updates % self.cfg.target_network_frequency == 0
                         else 0.0)
        average_weight = self.average_factor() if self.actor_average is not None else 0.0

        def eager() -> tuple[dict[str, float], torch.Tensor]:
            # Only an actor step reads the weight (a tensor: a doctor changing it recompiles
            # nothing).
            reg_weight = (torch.tensor(self.policy_reg_weight, device=obs.device) if actor_step
                          else None)
            out = self._update_body(*inputs, reg_weight, target_weight, average_weight,
                                    actor_step, use_reg, guard)
            values = _scalars(list(out.tensors.values())).tolist()
            # Under torch.compile's CUDA graphs the next call reuses td_abs's memory.
            return (self._finish(dict(zip(out.tensors, values)), out),
                    out.td_abs.clone() if self.compiled else out.td_abs)

        if self.graphs is None or not (guard is None or isinstance(guard, FiniteGuard)):
            return eager()
        key = (obs.shape[0], actor_step, use_reg, self.cfg.policy_frequency)
        scalars = torch.tensor([self.policy_reg_weight, target_weight, average_weight],
                               dtype=torch.float32).to(obs.device, non_blocking=True)

        def body(*static: torch.Tensor) -> tuple[list[torch.Tensor], _Body]:
            out = self._update_body(*static[:6], static[6][0], static[6][1], static[6][2],
                                    actor_step, use_reg, None)
            vector = _scalars([*out.tensors.values(), all_finite(out.checks)])
            return [vector, out.td_abs], out

        replayed, result = self.graphs.run(key, (*inputs, scalars), body, eager)
        if not replayed:
            return result
        (vector, td_abs), out = result
        values = vector.tolist()
        if guard is not None and values[-1] != 1.0:
            # A non-finite update: undo it, then take it eagerly so the guard skips exactly
            # the step that was not finite (and does whatever else it does on a refusal).
            self.graphs.restore()
            return eager()
        if guard is not None:
            guard.passed()
        return self._finish(dict(zip(out.tensors, values)), out), td_abs.clone()

    def _update_body(self, obs: torch.Tensor, action: torch.Tensor, reward: torch.Tensor,
                     next_obs: torch.Tensor, terminated: torch.Tensor, weights: torch.Tensor,
                     reg_weight: torch.Tensor | None, target_weight: float | torch.Tensor,
                     average_weight: float | torch.Tensor, actor_step: bool, use_reg: bool,
                     guard: Guard | None) -> _Body:
        """
        Compute one update on tensors alone, the device never read (a CUDA graph records it).

        :param target_weight: Polyak factor of the target critics this update (0: none).
        :param average_weight: factor of the averaged actor this update.
        :param actor_step: step the actor and the temperature (``policy_frequency`` times).
        :param use_reg: add the policy regularization term, weighted by ``reg_weight`` (read
            only with ``actor_step``).
        :param guard: judges each step (a Python bool: the device is read); ``None`` applies
            every step.
        """
        size = obs.shape[0]
        if self.compiled:
            torch.compiler.cudagraph_mark_step_begin()

        # Critic step.
        noise = torch.randn(size, self.act_dim, device=obs.device)
        qf_loss, qf1_loss, qf2_loss, q1_mean, td_abs = self._call(
            'critic', obs, action, reward, next_obs, terminated, weights, noise)
        self.critic_optimizer.zero_grad(set_to_none=True)
        qf_loss.backward()
        critic_params = list(self.critic.parameters())
        critic_losses = {'qf1_loss': qf1_loss, 'qf2_loss': qf2_loss}
        critic_ok, critic_norm = guarded_step(
            [self.critic_optimizer], critic_params, critic_params, critic_losses, guard,
            self.cfg.grad_clip_norm)
        out = _Body({'losses/qf1_loss': qf1_loss.detach(), 'losses/qf2_loss': qf2_loss.detach(),
                     'losses/qf1_values': q1_mean, 'losses/grad_norm_critic': critic_norm},
                    td_abs, [*critic_losses.values(), critic_norm], critic_ok)

        # Actor and temperature steps, delayed and repeated policy_frequency times.
        if actor_step:
            actor_params = list(self.actor.parameters())
            for _ in range(self.cfg.policy_frequency):
                noise = torch.randn(size, self.act_dim, device=obs.device)
                with _frozen(self.critic):
                    total, actor_loss, alpha_loss, entropy, reg, smooth = self._call(
                        'actor', obs, next_obs, noise, reg_weight, use_reg)
                self.actor_optimizer.zero_grad(set_to_none=True)
                self.alpha_optimizer.zero_grad(set_to_none=True)
                (total + alpha_loss).backward()
                actor_ok, actor_norm = guarded_step(
                    [self.actor_optimizer, self.alpha_optimizer], actor_params + [self.log_alpha],
                    actor_params, {'actor_loss': total, 'alpha_loss': alpha_loss}, guard,
                    self.cfg.grad_clip_norm)
                out.actor_ok.append(actor_ok)
                out.checks += [total, alpha_loss, actor_norm]
                out.actor_keys = ['losses/actor_loss', 'losses/alpha_loss', 'losses/entropy',
                                  'losses/grad_norm_actor']
                actor_tensors = [actor_loss.detach(), alpha_loss.detach(), entropy, actor_norm]
                if use_reg:
                    out.actor_keys.append('losses/policy_reg')
                    actor_tensors.append(reg.detach())
                if self.cfg.smoothness_weight > 0.0:
                    out.actor_keys.append('losses/action_smoothness')
                    actor_tensors.append(smooth)
            out.tensors.update(zip(out.actor_keys, actor_tensors))
        out.tensors['losses/alpha'] = self.log_alpha.detach().exp()

        # Polyak averaging of the target critics: target <- w online + (1 - w) target.
        with torch.no_grad():
            if critic_ok and not (isinstance(target_weight, float) and target_weight == 0.0):
                for target, online in zip(self.critic_target.parameters(), critic_params):
                    target.lerp_(online, target_weight)
            # Weight averaging of the actor (Nikishin et al. 2018, "Improving Stability in
            # Deep Reinforcement Learning with Weight Averaging"): late updates that swing the
            # deterministic policy in and out of the goal are averaged out of what is
            # evaluated.
            if self.actor_average is not None:
                for average, online in zip(self.actor_average.parameters(),
                                           self.actor.parameters()):
                    average.lerp_(online, average_weight)
        # Drop every gradient now: under CUDA graphs they alias memory the next replay reuses.
        for optimizer in (self.critic_optimizer, self.actor_optimizer, self.alpha_optimizer):
            optimizer.zero_grad(set_to_none=True)
        return out

    def _finish(self, metrics: dict[str, float], out: _Body) -> dict[str, float]:
        """Count the update and complete its metrics (the actor's repeat between its steps)."""
        skipped = not out.critic_ok or not all(out.actor_ok)
        self.num_updates += 1
        self.num_skipped += int(skipped)
        self.num_actor_updates += sum(out.actor_ok)
        if out.actor_keys:
            self._actor_metrics = {k: metrics[k] for k in out.actor_keys}
        metrics.update({k: v for k, v in self._actor_metrics.items() if k not in metrics})
        metrics['doctor/skipped'] = float(skipped)
        return metrics

    def _graph_state(self) -> list[torch.Tensor]:
        """Return every tensor an update reads or changes between calls (for the graphs)."""
        modules = [self.actor, self.critic, self.critic_target]
        if self.actor_average is not None:
            modules.append(self.actor_average)
        if self.policy_reg.reference is not None:
            modules.append(self.policy_reg.reference)
        tensors = [t for m in modules for t in (*m.parameters(), *m.buffers())]
        tensors.append(self.log_alpha)
        for optimizer in (self.critic_optimizer, self.actor_optimizer, self.alpha_optimizer):
            for state in optimizer.state.values():
                tensors += [v for v in state.values() if isinstance(v, torch.Tensor)]
        return tensors

    def _graph_settings(self) -> tuple[Any, ...]:
        """Return the host-side values a captured update bakes in (learning rates, config)."""
        groups = tuple(tuple((k, v) for k, v in group.items() if k != 'params')
                       for optimizer in (self.critic_optimizer, self.actor_optimizer,
                                         self.alpha_optimizer)
                       for group in optimizer.param_groups)
        return groups, tuple(vars(self.cfg).values()), self.target_entropy


@contextlib.contextmanager
def _frozen(module: nn.Module) -> Iterator[None]:
    """
    Build graphs that differentiate through ``module`` but not into its weights.

    The actor loss needs dQ/da, not the critics' weight gradients: computing them and throwing
    them away cost about 10 % of a CPU update.
    """
    module.requires_grad_(False)
    try:
        yield
    finally:
        module.requires_grad_(True)
