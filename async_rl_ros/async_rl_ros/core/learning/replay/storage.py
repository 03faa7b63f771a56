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


"""Ring storage of the replay buffer: transitions in preallocated numpy arrays."""

from __future__ import annotations

from typing import Any, Mapping

from async_rl_ros.core.records import field_shape, OPTIONAL_FIELDS, TRANSITION_FIELDS
import numpy as np


class ReplayStorage:
    """
    Fixed-capacity ring of transitions in preallocated numpy arrays (not locked by itself).

    The arrays are attributes named after :data:`TRANSITION_FIELDS` (``storage.obs``, ...) of
    ``capacity`` rows. Besides them, ``insert_id[i]`` is the serial number of the transition in
    slot ``i`` (0 for the first transition ever added), which tells a recycled slot apart.

    :param capacity: number of transitions.
    :param obs_dim: length of an observation.
    :param act_dim: length of an action.
    """

    obs: np.ndarray             # (capacity, obs_dim) float32
    action: np.ndarray          # (capacity, act_dim) float32, normalized to [-1, 1]
    reward: np.ndarray          # (capacity,) float32
    next_obs: np.ndarray        # (capacity, obs_dim) float32
    terminated: np.ndarray      # (capacity,) bool: a terminal state, no bootstrapping
    truncated: np.ndarray       # (capacity,) bool: cut by the time limit, bootstrap
    policy_version: np.ndarray  # (capacity,) int64: version of the policy that acted
    worker_id: np.ndarray       # (capacity,) int32: environment worker that collected it
    source: np.ndarray          # (capacity,) int8: index in SOURCES (0 sim, 1 real)
    insert_id: np.ndarray       # (capacity,) int64: serial number, -1 for an empty slot

    def __init__(self, capacity: int, obs_dim: int, act_dim: int):
        if int(capacity) < 1 or int(obs_dim) < 1 or int(act_dim) < 1:
            raise ValueError(f'capacity, obs_dim and act_dim must be >= 1, got {capacity}, '
                             f'{obs_dim}, {act_dim}')
        self.capacity = int(capacity)
        self.obs_dim = int(obs_dim)
        self.act_dim = int(act_dim)
        for name, (dtype, kind) in TRANSITION_FIELDS.items():
            shape = (self.capacity,) + field_shape(kind, self.obs_dim, self.act_dim)
            setattr(self, name, np.zeros(shape, dtype=dtype))
        self.insert_id = np.full(self.capacity, -1, dtype=np.int64)
        self._cursor = 0   # next slot to write
        self._size = 0     # filled slots
        self._added = 0    # transitions ever added

    def __len__(self) -> int:
        """Return the number of stored transitions."""
        return self._size

    @property
    def added(self) -> int:
        """Return how many transitions were ever added, overwritten ones included."""
        return self._added

    def _columns(self, batch: Mapping[str, Any]) -> tuple[int, dict[str, np.ndarray]]:
        unknown = sorted(set(batch) - set(TRANSITION_FIELDS))
        missing = [name for name in TRANSITION_FIELDS
                   if name not in batch and name not in OPTIONAL_FIELDS]
        if unknown or missing:
            raise KeyError(f'transition batch has unknown fields {unknown} and misses '
                           f'{missing}; expected {list(TRANSITION_FIELDS)} (optional: '
                           f'{list(OPTIONAL_FIELDS)})')
        batch = {**{k: v for k, v in OPTIONAL_FIELDS.items() if k not in batch}, **batch}
        n = None
        for name in TRANSITION_FIELDS:
            value = np.asarray(batch[name])
            if value.ndim:
                n = len(value) if n is None else n
                if len(value) != n:
                    raise ValueError(f'field {name!r} has {len(value)} rows, expected {n}')
        if n is None:
            raise ValueError('transition batch needs a leading batch dimension')
        columns = {}
        for name, (dtype, kind) in TRANSITION_FIELDS.items():
            shape = (n,) + field_shape(kind, self.obs_dim, self.act_dim)
            value = np.asarray(batch[name])
            if value.ndim == 0 and kind == '':
                value = np.broadcast_to(value, shape)  # one version/worker for the whole batch
            elif kind == '' and value.shape == (n, 1):
                value = value.reshape(shape)
            if value.shape != shape:
                raise ValueError(f'field {name!r} has shape {value.shape}, expected {shape}')
            if dtype is np.bool_ and value.dtype != np.bool_:
                if not np.isin(value, (0, 1)).all():
                    raise ValueError(f'field {name!r} must hold booleans')
            elif np.issubdtype(dtype, np.integer) and value.dtype.kind not in 'iu':
                raise ValueError(f'field {name!r} must hold integers, got {value.dtype}')
            columns[name] = value
        return n, columns

    def extend(self, batch: Mapping[str, Any]) -> np.ndarray:
        """
        Append transitions, overwriting the oldest ones once the ring is full.

        :param batch: every field of :data:`TRANSITION_FIELDS` as an array with a leading batch
            dimension ``n`` (``policy_version``, ``worker_id`` and ``source`` may also be
            scalars; ``source`` may be left out: simulated data).
        :returns: the slot each of the ``n`` transitions was written to, in order (int64). When
            ``n > capacity`` only the last ``capacity`` survive; the returned slots are those
            of a one-by-one insertion, so they repeat.
        """
        n, columns = self._columns(batch)
        cap = self.capacity
        indices = (self._cursor + np.arange(n, dtype=np.int64)) % cap
        keep = min(n, cap)
        start = (self._cursor + n - keep) % cap   # slot of the first surviving row
        first = min(keep, cap - start)            # rows before the ring wraps
        ids = self._added + np.arange(n - keep, n, dtype=np.int64)
        for name, value in list(columns.items()) + [('insert_id', ids)]:
            rows = value[n - keep:] if name != 'insert_id' else value
            target = getattr(self, name)
            target[start:start + first] = rows[:first]
            target[:keep - first] = rows[first:]
        self._cursor = (self._cursor + n) % cap
        self._size = min(self._size + n, cap)
        self._added += n
        return indices

    def get(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        """
        Gather transitions.

        :param indices: slots (filled ones).
        :returns: a copy of every field for those slots, plus ``insert_id``.
        """
        idx = np.asarray(indices, dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= self._size):
            raise IndexError(f'slot out of range [0, {self._size})')
        out = {name: getattr(self, name)[idx] for name in TRANSITION_FIELDS}
        out['insert_id'] = self.insert_id[idx]
        return out

    def state_dict(self) -> dict[str, Any]:
        """
        Return a copy of the filled part of the ring and its cursor.

        :returns: a dict of plain ints and numpy arrays.
        """
        state: dict[str, Any] = {'capacity': self.capacity, 'obs_dim': self.obs_dim,
                                 'act_dim': self.act_dim, 'cursor': self._cursor,
                                 'size': self._size, 'added': self._added}
        for name in list(TRANSITION_FIELDS) + ['insert_id']:
            state[name] = getattr(self, name)[:self._size].copy()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """
        Restore a storage saved by :meth:`state_dict`.

        :param state: a storage of the same capacity and dimensions.
        """
        dims = (int(state['capacity']), int(state['obs_dim']), int(state['act_dim']))
        if dims != (self.capacity, self.obs_dim, self.act_dim):
            raise ValueError(f'storage (capacity, obs_dim, act_dim) = {dims} cannot be loaded '
                             f'into {(self.capacity, self.obs_dim, self.act_dim)}')
        size = int(state['size'])
        for name in list(TRANSITION_FIELDS) + ['insert_id']:
            target = getattr(self, name)
            if name in OPTIONAL_FIELDS and name not in state:  # saved before the field existed
                target[:size] = OPTIONAL_FIELDS[name]
                target[size:] = 0
                continue
            value = np.asarray(state[name])
            if value.shape != (size,) + target.shape[1:]:
                raise ValueError(f'saved field {name!r} has shape {value.shape}')
            target[:size] = value
            target[size:] = -1 if name == 'insert_id' else 0
        self._cursor = int(state['cursor'])
        self._size = size
        self._added = int(state['added'])
