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


"""Replay buffer facade: one storage, one sampler and one lock, safe across threads."""

from __future__ import annotations

import threading
from typing import Any, Mapping

from async_rl_ros.core.config import ConfigError, ReplayConfig
from async_rl_ros.core.learning.replay.sampler import CountAwarePrioritizedSampler
from async_rl_ros.core.learning.replay.storage import ReplayStorage
import numpy as np


class ReplayBuffer:
    """
    Thread-safe prioritized replay: one storage, one sampler and one lock.

    :param cfg: replay configuration.
    :param obs_dim: length of an observation.
    :param act_dim: length of an action.
    :param rng: random generator of the sampler; seeded with ``cfg.seed`` when omitted.
    """

    def __init__(self, cfg: ReplayConfig, obs_dim: int, act_dim: int,
                 rng: np.random.Generator | None = None):
        if not isinstance(cfg, ReplayConfig):
            raise ConfigError('replay', cfg, 'a ReplayConfig')
        self.cfg = cfg
        self.storage = ReplayStorage(cfg.capacity, obs_dim, act_dim)
        self.sampler = CountAwarePrioritizedSampler(cfg, rng)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """Return the number of stored transitions."""
        return len(self.storage)

    @property
    def capacity(self) -> int:
        """Return the maximum number of transitions."""
        return self.storage.capacity

    def extend(self, batch: Mapping[str, Any]) -> np.ndarray:
        """
        Append transitions; each enters with the largest possible priority.

        :param batch: see :meth:`ReplayStorage.extend`.
        :returns: the slot of each transition.
        """
        with self._lock:
            indices = self.storage.extend(batch)
            self.sampler.on_insert(indices, self.storage.source[indices])
        return indices

    def add(self, **transition: Any) -> int:
        """
        Append one transition.

        :param transition: every field of :data:`TRANSITION_FIELDS`, without a batch dimension.
        :returns: its slot.
        """
        batch = {k: np.asarray(v)[None] for k, v in transition.items()}
        return int(self.extend(batch)[0])

    def sample(self, batch_size: int, learner_version: int | None = None
               ) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, Any]]:
        """
        Draw a batch.

        :param batch_size: number of draws (with replacement).
        :param learner_version: the learner's policy version, to judge staleness.
        :returns: ``(indices, batch, info)``: slots, a copy of every field for them, and the
            sampler's info (see :meth:`CountAwarePrioritizedSampler.sample`) plus
            ``insert_ids`` to pass back to :meth:`update_priority`.
        """
        with self._lock:
            indices, info = self.sampler.sample(batch_size, self.storage.policy_version,
                                                learner_version)
            batch = self.storage.get(indices)
        info['insert_ids'] = batch.pop('insert_id')
        return indices, batch, info

    def update_priority(self, indices: np.ndarray, td: Any,
                        insert_ids: np.ndarray | None = None) -> int:
        """
        Set the TD errors of sampled transitions.

        :param indices: slots returned by :meth:`sample`.
        :param td: their TD errors.
        :param insert_ids: ``info['insert_ids']`` of that sample; when given, slots that have
            been overwritten since then are left alone.
        :returns: the number of slots updated.
        """
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if hasattr(td, 'detach'):
            td = td.detach().cpu().numpy()
        err = np.broadcast_to(np.asarray(td, dtype=np.float64).reshape(-1), idx.shape)
        with self._lock:
            if insert_ids is not None:
                ids = np.asarray(insert_ids, dtype=np.int64).reshape(-1)
                if ids.shape != idx.shape:
                    raise ValueError(f'{ids.size} insert ids for {idx.size} indices')
                same = self.storage.insert_id[idx] == ids
                idx, err = idx[same], err[same]
            self.sampler.update_priority(idx, err)
        return int(idx.size)

    def stats(self) -> dict[str, float]:
        """Return counters for logging (size, transitions added and the sampler's counters)."""
        with self._lock:
            out = {'size': len(self.storage), 'added': self.storage.added}
            out.update(self.sampler.stats())
        return out

    def state_dict(self) -> dict[str, Any]:
        """
        Return a consistent copy of storage and sampler.

        :returns: ``{'storage': ..., 'sampler': ..., 'config': flat config}``.
        """
        with self._lock:
            return {'storage': self.storage.state_dict(), 'sampler': self.sampler.state_dict(),
                    'config': self.cfg.to_flat()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """
        Restore a buffer saved by :meth:`state_dict` (the current configuration is kept).

        :param state: a buffer of the same capacity and dimensions.
        """
        with self._lock:
            self.storage.load_state_dict(state['storage'])
            self.sampler.load_state_dict(state['sampler'])
