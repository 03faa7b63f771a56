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
Policy regularization: an L2 pull of the actor's mean action towards a reference policy.

The reference is a policy version the workers still act with. The learner sets it to the
oldest such version (:meth:`Learner.check_policy_divergence`), so the term keeps the actor
close to the behaviour that generated the data. It is a proximal penalty with an adaptive
coefficient, as in the KL-penalty variant of PPO (Schulman et al. 2017, "Proximal Policy
Optimization Algorithms", section 4). There, too, the coefficient is raised while the policies
drift apart and lowered again once they agree.

The weight is the configured ``sac.policy_reg_weight`` times a :attr:`~PolicyRegularization.scale`
that the training doctor multiplies (``policy_divergence``: x1.5) and later divides back. With a
configured weight of 0, the term starts at :data:`POLICY_REG_BASE` once the scale rises above 1.
It is off again when the scale returns to 1.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from async_rl_ros.core.learning.networks import PolicyForExport
import torch

__all__ = ['POLICY_REG_BASE', 'PolicyRegularization', 'legacy_state']

#: Weight the term has at a scale of 1 when the configured weight is 0 (the doctor turned it on).
POLICY_REG_BASE = 0.1

_UNIT = 1e-9  # a scale this close to 1 is 1: x1.5 then /1.5 must switch the term off again


class PolicyRegularization:
    """
    The weight, its scale and the reference policy of the regularization term.

    :param obs_dim: observation width of the reference policy.
    :param act_dim: its action width.
    :param hidden: its hidden layer widths (the actor's).
    :param device: where the reference policy runs (the learner's device).
    :param weight: the configured weight (``sac.policy_reg_weight``).
    """

    def __init__(self, obs_dim: int, act_dim: int, hidden: Sequence[int], device: torch.device,
                 weight: float):
        self._dims = (int(obs_dim), int(act_dim), tuple(hidden))
        self.device = device
        self.configured = float(weight)
        self.scale = 1.0
        self.reference: PolicyForExport | None = None

    @property
    def weight(self) -> float:
        """Return the weight the actor loss uses now."""
        if self.configured > 0.0:
            return self.configured * self.scale
        return POLICY_REG_BASE * self.scale if self.scale > 1.0 else 0.0

    @property
    def active(self) -> bool:
        """Tell whether the term is computed: a reference is set and the weight is positive."""
        return self.reference is not None and self.weight > 0.0

    def scale_by(self, factor: float) -> float:
        """
        Multiply the scale of the weight.

        :param factor: non-negative and finite (0 turns the term off).
        :returns: the new weight.
        """
        if not math.isfinite(factor) or factor < 0:
            raise ValueError(f'scale factor must be >= 0 and finite, got {factor}')
        self.scale *= factor
        if abs(self.scale - 1.0) < _UNIT:
            self.scale = 1.0
        return self.weight

    def set_reference(self, state: Mapping[str, torch.Tensor] | None) -> None:
        """
        Set the policy the actor's mean action is pulled towards.

        :param state: an :class:`Actor` or :class:`PolicyForExport` state dict (its trunk and
            mean head are used, never its normalization), or ``None`` to remove the reference.
        """
        if state is None:
            self.reference = None
            return
        if self.reference is None:
            policy = PolicyForExport(*self._dims)
            self.reference = policy.to(self.device).requires_grad_(False)
        # Copied in place: a compiled update keeps the same tensors (no re-capture).
        self.reference.load_actor_state_dict(state)

    def loss(self, obs: torch.Tensor, mean_action: torch.Tensor) -> torch.Tensor:
        """
        Return the mean squared distance between the actor's and the reference's mean actions.

        :param obs: normalized observations, shape ``(B, obs_dim)``.
        :param mean_action: the actor's squashed mean actions on them, shape ``(B, act_dim)``.
        """
        with torch.no_grad():
            reference = self.reference(obs)
        return (mean_action - reference).pow(2).sum(dim=-1).mean()

    def state_dict(self) -> dict[str, Any]:
        """Return the weight (for the record), the scale and the reference's weights."""
        return {'weight': self.weight, 'scale': self.scale,
                'reference': None if self.reference is None else self.reference.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """
        Restore a :meth:`state_dict`; the configured weight stays this run's.

        :param state: a dict made by :meth:`state_dict`.
        """
        self.scale = float(state['scale'])
        self.set_reference(state['reference'])


def legacy_state(state: Mapping[str, Any], configured: float) -> dict[str, Any]:
    """
    Read the regularization of a SAC checkpoint that saved its weight, not its scale.

    :param state: the SAC state dict of such a checkpoint (``policy_reg_weight``,
        ``reference_policy``).
    :param configured: this run's configured weight.
    :returns: a :meth:`PolicyRegularization.state_dict` of the same weight.
    """
    weight = float(state['policy_reg_weight'])
    base = configured if configured > 0.0 else POLICY_REG_BASE
    return {'scale': weight / base if weight > 0.0 or configured > 0.0 else 1.0,
            'reference': state['reference_policy']}
