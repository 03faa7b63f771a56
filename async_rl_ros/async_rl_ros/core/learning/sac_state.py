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
What a :class:`~async_rl_ros.core.learning.sac.SAC` saves to resume training, and its reading.

:class:`SACState` is a base class of the SAC, as :class:`~.sac_knobs.SACKnobs` is: its
:meth:`~SACState.state_dict` holds the networks (actor, twin critics, their targets, the
averaged actor), the three optimizers, the temperature, the policy regularization and the
update counters, plus the dimensions it was built with, which
:meth:`~SACState.load_state_dict` checks first. Older checkpoints still load: from before the
critic options (critics without layer norm), without an averaged actor (the average starts at
the actor) and from before the regularization saved its scale
(:func:`~async_rl_ros.core.learning.policy_reg.legacy_state`).
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

from async_rl_ros.core.config import SACConfig
from async_rl_ros.core.learning.networks import Actor, TwinQ
from async_rl_ros.core.learning.policy_reg import legacy_state, PolicyRegularization
import torch

__all__ = ['SACState']

#: The optimizers of a SAC, by attribute name.
OPTIMIZERS = ('actor_optimizer', 'critic_optimizer', 'alpha_optimizer')


class SACState:
    """The resumable state of a SAC: what it saves, and its checked reading."""

    cfg: SACConfig
    obs_dim: int
    act_dim: int
    actor: Actor
    critic: TwinQ
    critic_target: TwinQ
    actor_average: Actor | None
    log_alpha: torch.Tensor
    policy_reg: PolicyRegularization
    num_updates: int
    num_actor_updates: int
    num_skipped: int

    def dims(self) -> dict[str, Any]:
        """Return the dimensions a state must match: sizes, hidden layers, critic layer norm."""
        return {'obs_dim': self.obs_dim, 'act_dim': self.act_dim,
                'hidden': list(self.cfg.hidden), 'critic_layer_norm': self.cfg.critic_layer_norm}

    def state_dict(self) -> dict[str, Any]:
        """
        Return everything needed to resume training.

        :returns: networks, targets, optimizers, temperature, regularization and counters.
        """
        return {
            'dims': self.dims(),
            'actor': self.actor.state_dict(),
            'critic': self.critic.state_dict(),
            'critic_target': self.critic_target.state_dict(),
            'actor_average': (None if self.actor_average is None
                              else self.actor_average.state_dict()),
            'log_alpha': self.log_alpha.detach().clone(),
            **{name: getattr(self, name).state_dict() for name in OPTIMIZERS},
            'policy_reg': self.policy_reg.state_dict(),
            'counters': {'num_updates': self.num_updates,
                         'num_actor_updates': self.num_actor_updates,
                         'num_skipped': self.num_skipped},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """
        Restore a :meth:`state_dict` (tensors are moved to the SAC's device).

        :param state: a dict made by :meth:`state_dict` of a SAC with the same dimensions.
        :raises ValueError: the dimensions differ.
        """
        expected = self.dims()
        # Checkpoints from before the critic options were critics without layer norm.
        if {'critic_layer_norm': False, **dict(state['dims'])} != expected:
            raise ValueError(f'checkpoint dimensions {state["dims"]} differ from {expected}')
        self.actor.load_state_dict(state['actor'])
        self.critic.load_state_dict(state['critic'])
        self.critic_target.load_state_dict(state['critic_target'])
        if self.actor_average is not None:
            # A checkpoint from a run without averaging starts the average at its actor.
            average = state.get('actor_average')
            self.actor_average.load_state_dict(average if average is not None
                                               else state['actor'])
        with torch.no_grad():
            self.log_alpha.copy_(state['log_alpha'])
        for name in OPTIMIZERS:
            optimizer = getattr(self, name)
            kernel = {k: optimizer.defaults[k] for k in ('fused', 'foreach', 'capturable')}
            # PyTorch keeps the given moment tensors when they are on the right device: a
            # copy, so this SAC never shares them with the dict or with another SAC loaded
            # from it.
            optimizer.load_state_dict(copy.deepcopy(state[name]))
            # A saved group carries its kernel choice: keep the one the SAC made (an older
            # checkpoint would turn the fused kernel off; a CPU one, capture off).
            for group in optimizer.param_groups:
                group.update(kernel)
        self.policy_reg.load_state_dict(state['policy_reg'] if 'policy_reg' in state
                                        else legacy_state(state, self.policy_reg.configured))
        counters = state['counters']
        self.num_updates = int(counters['num_updates'])
        self.num_actor_updates = int(counters['num_actor_updates'])
        self.num_skipped = int(counters['num_skipped'])
