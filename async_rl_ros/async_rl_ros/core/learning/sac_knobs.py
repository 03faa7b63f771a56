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
What of a SAC the training doctor may turn: learning rates, temperature, policy regularization.

:class:`SACKnobs` is a base class of :class:`~async_rl_ros.core.learning.sac.SAC`: the
:class:`~async_rl_ros.core.learning.doctor.interface.Knobs` the doctor's remedies call, and
the reference policy the regularization pulls towards. A remedy is undone by the same knob
with ``1 / factor``, which brings it back to where the remedy found it.
"""

from __future__ import annotations

import math
from typing import Mapping

from async_rl_ros.core.learning.policy_reg import PolicyRegularization
import torch

__all__ = ['SACKnobs']


class SACKnobs:
    """The doctor's knobs of a SAC (its optimizers, ``log_alpha`` and ``policy_reg``)."""

    actor_optimizer: torch.optim.Optimizer
    critic_optimizer: torch.optim.Optimizer
    alpha_optimizer: torch.optim.Optimizer
    log_alpha: torch.Tensor
    policy_reg: PolicyRegularization

    def scale_learning_rate(self, factor: float) -> None:
        """
        Multiply the learning rate of every optimizer.

        :param factor: strictly positive multiplier.
        """
        _check_factor(factor)
        for optimizer in (self.actor_optimizer, self.critic_optimizer, self.alpha_optimizer):
            for group in optimizer.param_groups:
                group['lr'] = group['lr'] * factor

    def scale_temperature(self, factor: float) -> None:
        """
        Multiply the temperature alpha (``log_alpha += log(factor)``).

        :param factor: strictly positive multiplier.
        """
        _check_factor(factor)
        with torch.no_grad():
            self.log_alpha.add_(math.log(factor))

    def scale_policy_regularization(self, factor: float) -> float:
        """
        Multiply the scale of the policy regularization weight (see :mod:`.policy_reg`).

        :param factor: non-negative multiplier (0 turns the term off).
        :returns: the new weight.
        """
        return self.policy_reg.scale_by(factor)

    def set_reference_policy(self, state: Mapping[str, torch.Tensor] | None) -> None:
        """Set (or, with ``None``, remove) the policy the regularization pulls towards."""
        self.policy_reg.set_reference(state)

    @property
    def policy_reg_weight(self) -> float:
        """Return the weight of the policy regularization now."""
        return self.policy_reg.weight

    @property
    def reference_active(self) -> bool:
        """Tell whether the policy regularization term is computed."""
        return self.policy_reg.active


def _check_factor(factor: float) -> None:
    if not math.isfinite(factor) or factor <= 0:
        raise ValueError(f'scale factor must be > 0 and finite, got {factor}')
