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
The policies a SAC hands out: the online actor, its Polyak average and their exported copies.

:class:`SACPolicies` is a base class of :class:`~async_rl_ros.core.learning.sac.SAC`. With
``policy_average_tau > 0`` the update moves an averaged copy of the actor towards the online
one (weight averaging, Nikishin et al. 2018, "Improving Stability in Deep Reinforcement
Learning with Weight Averaging"); that average is the policy the evaluator scores and a user
gets. :meth:`SACPolicies.average_factor` says how far it moves at each update: a window that
grows with training (the power-function EMA of Karras et al. 2024, EDM2).
"""

from __future__ import annotations

from async_rl_ros.core.config import SACConfig
from async_rl_ros.core.learning.networks import Actor, PolicyForExport
import torch

__all__ = ['SACPolicies']


class SACPolicies:
    """The actors of a SAC (``actor``, ``actor_average``) and the temperature it reports."""

    cfg: SACConfig
    actor: Actor
    actor_average: Actor | None
    log_alpha: torch.Tensor
    num_updates: int

    @property
    def alpha(self) -> float:
        """Return the current temperature alpha."""
        return float(self.log_alpha.detach().exp())

    def export_policy(self, obs_mean: torch.Tensor | None = None,
                      obs_std: torch.Tensor | None = None,
                      evaluated: bool = False) -> PolicyForExport:
        """
        Return a CPU copy of the deterministic policy for workers (see :class:`PolicyForExport`).

        :param obs_mean: observation mean the workers subtract (default 0).
        :param obs_std: observation scale the workers divide by (default 1).
        :param evaluated: copy :attr:`evaluated_actor` instead of the online actor.
        :returns: a TorchScript-compatible module.
        """
        actor = self.evaluated_actor if evaluated else self.actor
        return actor.deterministic_policy(obs_mean, obs_std)

    def average_factor(self) -> float:
        """
        Return the weight the averaged actor moves towards the online one at this update.

        ``policy_average_tau`` while its window of ``1 / tau`` updates spans at least
        ``policy_average_fraction`` of the ``t`` updates so far, then ``1 / (fraction * t)``:
        late in a run the average spans that fraction of training instead of a fixed
        ``1 / tau`` updates, so a swing of the online actor moves it less the longer the run.
        """
        tau, fraction = self.cfg.policy_average_tau, self.cfg.policy_average_fraction
        if fraction <= 0.0:
            return tau
        return min(tau, 1.0 / (fraction * (self.num_updates + 1)))

    @property
    def evaluated_actor(self) -> Actor:
        """Return the actor a user gets: the averaged one when averaging is on."""
        return self.actor if self.actor_average is None else self.actor_average
