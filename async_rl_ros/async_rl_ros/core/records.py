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
The records that cross a boundary, defined once: a batch of transitions and a policy state.

* A **transition batch** goes from a worker to the learner: one numpy array per field of
  :data:`TRANSITION_FIELDS`, with a leading batch dimension. Workers fill them with
  :func:`empty_transition_batch`; the replay buffer, the local transport, the ROS messages and
  the rosbag reader all read the schema from here.
* A :class:`PolicyState` goes from the learner to the workers: the actor's weights, the
  observation normalizer statistics they act with, and the version. :meth:`PolicyState.check`
  refuses what would make a policy act with NaN (non-finite statistics, a zero standard
  deviation, a negative clip), whatever carried the state.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, TypedDict

import numpy as np
import torch

__all__ = [
    'TRANSITION_FIELDS',
    'SOURCES',
    'OPTIONAL_FIELDS',
    'TransitionBatch',
    'empty_transition_batch',
    'field_shape',
    'PolicyState',
    'PolicyStateError',
]

#: Transition fields: name -> (dtype, per-transition shape kind: ``obs``, ``act`` or scalar).
TRANSITION_FIELDS: dict[str, tuple[Any, str]] = {
    'obs': (np.float32, 'obs'),
    'action': (np.float32, 'act'),
    'reward': (np.float32, ''),
    'next_obs': (np.float32, 'obs'),
    'terminated': (np.bool_, ''),
    'truncated': (np.bool_, ''),
    'policy_version': (np.int64, ''),
    'worker_id': (np.int32, ''),
    'source': (np.int8, ''),
}
#: Where a transition comes from (the ``source`` field holds the index): mixed fleets weight
#: real-robot data with ``replay.real_weight``.
SOURCES = ('sim', 'real')
#: Fields a batch may leave out, with the value they then take.
OPTIONAL_FIELDS = {'source': SOURCES.index('sim')}


class TransitionBatch(TypedDict):
    """A batch of transitions: every field of :data:`TRANSITION_FIELDS`, batch dimension first."""

    obs: np.ndarray             # (n, obs_dim) float32, raw (the learner normalizes)
    action: np.ndarray          # (n, act_dim) float32 in [-1, 1]
    reward: np.ndarray          # (n,) float32
    next_obs: np.ndarray        # (n, obs_dim) float32
    terminated: np.ndarray      # (n,) bool: a true end (no bootstrap)
    truncated: np.ndarray       # (n,) bool: a time limit or an interruption (bootstrap)
    policy_version: np.ndarray  # (n,) int64: version that chose the action, -1 random
    worker_id: np.ndarray       # (n,) int32
    source: np.ndarray          # (n,) int8: index in SOURCES


def field_shape(kind: str, obs_dim: int, act_dim: int) -> tuple[int, ...]:
    """Return the per-transition shape of a field kind of :data:`TRANSITION_FIELDS`."""
    return {'obs': (obs_dim,), 'act': (act_dim,), '': ()}[kind]


def empty_transition_batch(n: int, obs_dim: int, act_dim: int, worker_id: int = 0,
                           source: str = 'sim') -> TransitionBatch:
    """
    Return a zeroed batch of ``n`` transitions with the worker id and source filled in.

    :raises ValueError: ``source`` is not one of :data:`SOURCES`.
    """
    if source not in SOURCES:
        raise ValueError(f'source = {source!r} is not allowed (one of {SOURCES})')
    batch = {name: np.zeros((n,) + field_shape(kind, obs_dim, act_dim), dtype)
             for name, (dtype, kind) in TRANSITION_FIELDS.items()}
    batch['worker_id'][:] = worker_id
    batch['source'][:] = SOURCES.index(source)
    return TransitionBatch(**batch)


class PolicyStateError(ValueError):
    """A policy state a worker must not act with; ``field`` names the offending entry."""

    def __init__(self, field: str, detail: str):
        super().__init__(f'{field}: {detail}')
        self.field = field


@dataclasses.dataclass(frozen=True)
class PolicyState:
    """
    What a worker needs to act: actor weights, normalizer statistics, version.

    :param actor: the actor's state dict (CPU float32 tensors).
    :param obs_mean: observation mean the policy subtracts, ``(obs_dim,)``.
    :param obs_std: observation standard deviation it divides by, ``(obs_dim,)``, all > 0.
    :param obs_clip: normalized observations are clipped to ``[-obs_clip, obs_clip]``, > 0.
    :param version: the parameter-server version of these weights (>= 0).
    :param run_id: the learner run that published them (0: not from a weight path); versions
        are ordered within one run only (a restarted learner counts again).
    """

    actor: Mapping[str, torch.Tensor]
    obs_mean: np.ndarray
    obs_std: np.ndarray
    obs_clip: float
    version: int
    run_id: int = 0

    #: names of the normalizer entries when they travel as side data of a weight packet
    EXTRAS = ('obs_mean', 'obs_std', 'obs_clip')

    def check(self, obs_dim: int | None = None) -> 'PolicyState':
        """
        Raise :class:`PolicyStateError` unless a worker can act with this state.

        :param obs_dim: the observation width the worker expects (not checked when omitted).
        :returns: ``self``.
        """
        mean = np.asarray(self.obs_mean)
        std = np.asarray(self.obs_std)
        width = obs_dim if obs_dim is not None else mean.shape[-1] if mean.ndim else -1
        for name, value in (('obs_mean', mean), ('obs_std', std)):
            if value.shape != (width,):
                raise PolicyStateError(name, f'shape {value.shape}, expected ({width},)')
            if not np.isfinite(value).all():
                raise PolicyStateError(name, 'non-finite values')
        if not (std > 0).all():
            raise PolicyStateError('obs_std', f'must be > 0 (min {float(std.min()):g})')
        if not (math.isfinite(self.obs_clip) and self.obs_clip > 0):
            raise PolicyStateError('obs_clip', f'must be a finite number > 0, got '
                                   f'{self.obs_clip}')
        if self.version < 0:
            raise PolicyStateError('version', f'must be >= 0, got {self.version}')
        for name, tensor in self.actor.items():
            if not bool(torch.isfinite(tensor).all()):
                raise PolicyStateError(f'actor.{name}', 'non-finite values')
        return self

    def tensors(self) -> dict[str, np.ndarray]:
        """Return the actor's tensors as float32 numpy arrays (what a weight packet carries)."""
        return {k: v.detach().cpu().numpy().astype(np.float32, copy=False)
                for k, v in self.actor.items()}

    def extras(self) -> dict[str, np.ndarray]:
        """Return the normalizer entries as float32 arrays (a weight packet's side data)."""
        return {'obs_mean': np.asarray(self.obs_mean, np.float32),
                'obs_std': np.asarray(self.obs_std, np.float32),
                'obs_clip': np.asarray(self.obs_clip, np.float32)}

    @classmethod
    def from_parts(cls, tensors: Mapping[str, Any], extras: Mapping[str, Any], version: int,
                   obs_dim: int | None = None) -> 'PolicyState':
        """
        Rebuild a state from a packet's tensors and extras, and :meth:`check` it.

        :raises PolicyStateError: an entry is missing or a worker could not act with it.
        """
        missing = [k for k in cls.EXTRAS if k not in extras]
        if missing:
            raise PolicyStateError(missing[0], 'missing from the packet')
        clip = np.asarray(extras['obs_clip'], np.float64).reshape(-1)
        if clip.size != 1:
            raise PolicyStateError('obs_clip', f'{clip.size} values, expected 1')
        actor = {k: torch.as_tensor(np.array(v, np.float32, copy=True)) for k, v in
                 tensors.items()}
        return cls(actor=actor, obs_mean=np.array(extras['obs_mean'], np.float32),
                   obs_std=np.array(extras['obs_std'], np.float32), obs_clip=float(clip[0]),
                   version=int(version)).check(obs_dim)
