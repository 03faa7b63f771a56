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
Count-aware prioritized replay: ring storage, segment trees, sampler and a thread-safe facade.

Three small parts, each with ``state_dict()`` / ``load_state_dict()``:

* :class:`ReplayStorage` -- a fixed-capacity ring of preallocated numpy arrays. Every
  transition carries the ``policy_version`` that produced it and the ``worker_id`` of the
  environment worker that collected it.
* :class:`CountAwarePrioritizedSampler` -- priorities, sampling and importance weights. The
  priority of slot ``i`` is::

      p_i = alpha * |TD_i| + (1 - alpha) / sqrt(N_i + 1) + eps

  where ``N_i`` counts how often ``i`` was drawn (every draw counts, duplicates included) and
  ``eps`` keeps every priority above 0. Slot ``i`` is drawn with probability
  ``P_i = q_i / sum_j q_j`` where ``q_i = p_i ** priority_exponent``, independently for every
  item of a batch (with replacement). Importance weights are ``w_i = (q_i / q_min) ** -beta``
  with ``q_min`` the smallest ``q`` in the buffer, so ``0 < w_i <= 1`` and the least likely
  transition gets weight 1; ``beta`` grows linearly from ``beta_start`` to 1 over
  ``beta_steps`` sample calls. A new transition (or one that overwrites a slot) gets
  ``N_i = 0`` and ``|TD_i| =`` the running maximum of every ``|TD|`` seen (initially 1), i.e.
  the largest priority any transition can have, so it is drawn soon.
  Mixed fleets: a transition from a real robot (``source`` 1) is drawn with probability
  proportional to ``real_weight * q_i`` instead of ``q_i``; its importance weight still uses
  ``q_i``, so the preference for real data is kept, not corrected away.
  A :class:`SumTree` (sampling by prefix sums) and a :class:`MinTree` (``q_min``) keep
  sampling and updates at O(log n); both are updated and searched for a whole batch at once,
  one tree level per numpy operation.
* :class:`ReplayBuffer` -- owns one of each, guards them with a single lock (actors' data is
  ingested on one thread while the learner samples on another) and gathers the batches.

Staleness (``ReplayConfig.staleness``), judged by the lag ``learner_version - policy_version``
when the learner passes its version to ``sample``:

* ``'off'``: the lag is only reported (``info['policy_lag']``);
* ``'weight'``: draws are unchanged, the importance weight of a transition whose lag exceeds
  ``max_policy_lag`` is multiplied by ``stale_weight ** (lag - max_policy_lag)``;
* ``'skip'``: a stale transition is evicted from sampling for good (its sampling priority
  becomes 0 until its slot is overwritten; learner versions only grow, so it would stay stale)
  and the draw is repeated, for at most ``skip_redraws`` rounds. This is rejection sampling:
  the returned fresh transitions follow the priorities restricted to fresh data. Draws still
  stale after the last round (or when nothing fresh is left) are returned with weight 0, so
  the batch keeps its size and they do not contribute to the loss.
"""

from __future__ import annotations

import threading
from typing import Any, Mapping

from async_rl_ros.core.config import ConfigError, ReplayConfig
from async_rl_ros.core.records import field_shape, OPTIONAL_FIELDS, SOURCES, TRANSITION_FIELDS
import numpy as np

__all__ = [
    'ReplayConfig',
    'SumTree',
    'MinTree',
    'ReplayStorage',
    'CountAwarePrioritizedSampler',
    'ReplayBuffer',
]

_STALENESS = ('off', 'weight', 'skip')
_INT_MAX = 2**31 - 1


# ====================================================================== segment trees
class _SegmentTree:
    """
    Array-based binary segment tree over ``capacity`` leaves.

    Layout: ``tree[1]`` is the root, node ``k`` has children ``2k`` and ``2k + 1``, and leaf
    ``i`` is ``tree[size + i]`` with ``size`` the smallest power of two >= ``capacity``
    (``tree[0]`` is unused). Leaves beyond ``capacity`` hold the neutral element.
    """

    _neutral = 0.0

    def __init__(self, capacity: int):
        capacity = int(capacity)
        if capacity < 1:
            raise ValueError(f'tree capacity must be >= 1, got {capacity}')
        size = 1
        while size < capacity:
            size *= 2
        self._capacity = capacity
        self._size = size
        self._depth = size.bit_length() - 1
        self._tree = np.full(2 * size, self._neutral, dtype=np.float64)

    @staticmethod
    def _combine(left: np.ndarray, right: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    @property
    def capacity(self) -> int:
        """Return the number of leaves."""
        return self._capacity

    def _check(self, indices: np.ndarray) -> np.ndarray:
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= self._capacity):
            raise IndexError(f'leaf index out of range [0, {self._capacity})')
        return idx

    def get(self, indices: np.ndarray) -> np.ndarray:
        """
        Return the values of some leaves.

        :param indices: leaf indices.
        :returns: their values (float64).
        """
        return self._tree[self._check(indices) + self._size]

    def leaves(self) -> np.ndarray:
        """Return a copy of all ``capacity`` leaf values."""
        return self._tree[self._size:self._size + self._capacity].copy()

    def update(self, indices: np.ndarray, values: np.ndarray | float) -> None:
        """
        Set some leaves and refresh their ancestors, one level per numpy operation.

        :param indices: leaf indices; a repeated index must come with the same value.
        :param values: new leaf values (broadcast to ``indices``).
        """
        idx = self._check(indices)
        if idx.size == 0:
            return
        vals = np.broadcast_to(np.asarray(values, dtype=np.float64), idx.shape)
        if idx.size * 4 >= self._capacity:
            self._tree[idx + self._size] = vals
            self.rebuild()
            return
        node = idx + self._size
        tree, combine = self._tree, self._combine
        tree[node] = vals
        for _ in range(self._depth):
            node >>= 1
            left = node << 1
            tree[node] = combine(tree[left], tree[left + 1])

    def set_leaves(self, values: np.ndarray) -> None:
        """
        Replace all leaves at once and rebuild the tree in O(capacity).

        :param values: ``capacity`` leaf values.
        """
        vals = np.asarray(values, dtype=np.float64).reshape(-1)
        if vals.shape != (self._capacity,):
            raise ValueError(f'expected {self._capacity} leaf values, got {vals.shape}')
        self._tree[self._size:self._size + self._capacity] = vals
        self.rebuild()

    def rebuild(self) -> None:
        """Recompute every internal node from the leaves, level by level."""
        lo = self._size
        while lo > 1:
            hi, lo = lo, lo // 2
            self._tree[lo:hi] = self._combine(self._tree[2 * lo:2 * hi:2],
                                              self._tree[2 * lo + 1:2 * hi:2])

    def state_dict(self) -> dict[str, Any]:
        """
        Return a copy of the tree.

        :returns: ``{'capacity': int, 'tree': float64 array of 2 * size nodes}``.
        """
        return {'capacity': self._capacity, 'tree': self._tree.copy()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """
        Restore a tree saved by :meth:`state_dict`.

        :param state: a tree of the same capacity.
        """
        tree = np.asarray(state['tree'], dtype=np.float64)
        if int(state['capacity']) != self._capacity or tree.shape != self._tree.shape:
            raise ValueError(f'tree of capacity {state["capacity"]} cannot be loaded into one '
                             f'of capacity {self._capacity}')
        self._tree[:] = tree


class SumTree(_SegmentTree):
    """
    Segment tree of sums: total mass and prefix-sum search in O(log n).

    :param capacity: number of leaves (all start at 0).
    """

    _neutral = 0.0

    @staticmethod
    def _combine(left: np.ndarray, right: np.ndarray) -> np.ndarray:
        return left + right

    def total(self) -> float:
        """Return the sum of all leaves."""
        return float(self._tree[1])

    def find_prefix(self, targets: np.ndarray) -> np.ndarray:
        """
        Find, for each target mass ``u``, the leaf ``i`` with ``cum(i - 1) <= u < cum(i)``.

        ``cum(i)`` is the sum of leaves ``0..i``, so leaves of zero mass are never found. All
        targets descend together, one tree level per step. A target that rounding pushes past
        the mass of its subtree (which would end on an empty leaf) is searched again with a
        descent that never enters a subtree of zero mass.

        :param targets: masses in ``[0, total())``.
        :returns: leaf indices (int64).
        """
        targets = np.asarray(targets, dtype=np.float64).reshape(-1)
        u = targets.copy()
        node = np.ones(u.shape, dtype=np.int64)
        tree = self._tree
        for _ in range(self._depth):
            node <<= 1
            left = tree[node]
            right = u >= left
            u -= left * right
            node += right
        overflow = tree[node] <= 0.0
        if overflow.any():
            node[overflow] = self._guarded_descent(targets[overflow])
        return node - self._size

    def _guarded_descent(self, targets: np.ndarray) -> np.ndarray:
        u = targets.copy()
        node = np.ones(u.shape, dtype=np.int64)
        tree = self._tree
        for _ in range(self._depth):
            node <<= 1
            left = tree[node]
            right = (u >= left) & (tree[node + 1] > 0.0)
            u -= left * right
            node += right
        return node


class MinTree(_SegmentTree):
    """
    Segment tree of minima: the smallest leaf in O(1), updates in O(log n).

    :param capacity: number of leaves (all start at +inf, i.e. empty).
    """

    _neutral = np.inf

    @staticmethod
    def _combine(left: np.ndarray, right: np.ndarray) -> np.ndarray:
        return np.minimum(left, right)

    def minimum(self) -> float:
        """Return the smallest leaf (+inf when every leaf is empty)."""
        return float(self._tree[1])


# ====================================================================== storage
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


# ====================================================================== sampler
class CountAwarePrioritizedSampler:
    """
    Draw slots by count-aware priority and weight them (not locked by itself).

    The sampler knows slots only by index: :meth:`on_insert` tells it which slots received new
    transitions; the per-slot policy versions come with each :meth:`sample` call.

    :param cfg: replay configuration (``capacity`` and the priority options).
    :param rng: random generator; ``numpy.random.default_rng(cfg.seed)`` when omitted.
    """

    def __init__(self, cfg: ReplayConfig, rng: np.random.Generator | None = None):
        cfg.validate()
        self.cfg = cfg
        self.capacity = int(cfg.capacity)
        self._rng = rng if rng is not None else np.random.default_rng(cfg.seed)
        self._td = np.zeros(self.capacity, dtype=np.float64)       # |TD| per slot
        self._counts = np.zeros(self.capacity, dtype=np.int64)     # draws since insertion
        self._filled = np.zeros(self.capacity, dtype=bool)
        self._evicted = np.zeros(self.capacity, dtype=bool)        # staleness = skip
        self._source = np.zeros(self.capacity, dtype=np.int8)      # index in SOURCES
        self._sum = SumTree(self.capacity)
        self._min = MinTree(self.capacity)
        self._max_td = 1.0
        self._calls = 0
        self._evictions = 0
        self._nonfinite_td = 0

    # ------------------------------------------------------------------ priorities
    @property
    def sum_tree(self) -> SumTree:
        """Return the sum tree over ``q_i`` (0 for empty and evicted slots)."""
        return self._sum

    @property
    def min_tree(self) -> MinTree:
        """Return the min tree over ``q_i`` (+inf for empty and evicted slots)."""
        return self._min

    @property
    def counts(self) -> np.ndarray:
        """Return a read-only view of the per-slot draw counts ``N_i``."""
        view = self._counts.view()
        view.flags.writeable = False
        return view

    @property
    def max_td(self) -> float:
        """Return the running maximum of ``|TD|`` (the TD term of new transitions)."""
        return self._max_td

    @property
    def sample_calls(self) -> int:
        """Return the number of :meth:`sample` calls so far."""
        return self._calls

    @property
    def beta(self) -> float:
        """Return the importance-weight exponent that the next :meth:`sample` call uses."""
        steps = self.cfg.beta_steps
        frac = 1.0 if steps <= 0 else min(1.0, self._calls / steps)
        return self.cfg.beta_start + (1.0 - self.cfg.beta_start) * frac

    def priority(self, indices: np.ndarray) -> np.ndarray:
        """
        Return ``p_i = alpha * |TD_i| + (1 - alpha) / sqrt(N_i + 1) + eps``.

        :param indices: slots.
        :returns: their priorities (float64).
        """
        idx = np.asarray(indices, dtype=np.int64)
        alpha = self.cfg.alpha
        return (alpha * self._td[idx] + (1.0 - alpha) / np.sqrt(self._counts[idx] + 1.0)
                + self.cfg.eps)

    def probabilities(self, indices: np.ndarray) -> np.ndarray:
        """
        Return the probability that one draw picks each slot now.

        :param indices: slots.
        :returns: ``w_i q_i / sum_j w_j q_j`` with ``w`` the source weight (0 for empty or
            evicted slots).
        """
        total = self._sum.total()
        q = self._sum.get(indices)
        return q / total if total > 0.0 else np.zeros_like(q)

    def source_weight(self, indices: np.ndarray) -> np.ndarray:
        """
        Return the sampling factor of each slot's source (``real_weight`` for real data).

        :param indices: slots.
        :returns: float64 factors, 1 for simulated transitions.
        """
        real = self._source[np.asarray(indices, dtype=np.int64)] == SOURCES.index('real')
        return np.where(real, self.cfg.real_weight, 1.0)

    def _refresh(self, idx: np.ndarray) -> None:
        q = self.priority(idx)
        if self.cfg.priority_exponent != 1.0:
            q = q ** self.cfg.priority_exponent
        live = self._filled[idx] & ~self._evicted[idx]
        self._sum.update(idx, np.where(live, q * self.source_weight(idx), 0.0))
        self._min.update(idx, np.where(live, q, np.inf))

    def on_insert(self, indices: np.ndarray, sources: np.ndarray | None = None) -> None:
        """
        Register new transitions: count 0, TD term at the running maximum, not evicted.

        :param indices: slots just written (repeats allowed).
        :param sources: index in :data:`SOURCES` of each (all simulated when omitted).
        """
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        src = (np.zeros(idx.size, dtype=np.int8) if sources is None
               else np.broadcast_to(np.asarray(sources, dtype=np.int8).reshape(-1), idx.shape))
        if idx.size > self.capacity:
            idx, src = idx[-self.capacity:], src[-self.capacity:]
        self._source[idx] = src
        self._td[idx] = self._max_td
        self._counts[idx] = 0
        self._filled[idx] = True
        self._evicted[idx] = False
        self._refresh(idx)

    def update_priority(self, indices: np.ndarray, td: Any) -> None:
        """
        Set the TD errors of sampled slots.

        Non-finite TD errors are replaced by the running maximum (and counted in
        :meth:`stats`) so that one bad loss cannot poison the trees.

        :param indices: slots (filled ones; if one repeats, its last TD error counts).
        :param td: TD errors (any sign), an array, a scalar or a CPU/GPU torch tensor.
        """
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if hasattr(td, 'detach'):
            td = td.detach().cpu().numpy()
        err = np.abs(np.asarray(td, dtype=np.float64)).reshape(-1)
        if err.size == 1 and idx.size != 1:
            err = np.broadcast_to(err, idx.shape)
        if err.shape != idx.shape:
            raise ValueError(f'{err.size} TD errors for {idx.size} indices')
        if idx.size == 0:
            return
        if idx.min() < 0 or idx.max() >= self.capacity or not self._filled[idx].all():
            raise IndexError('update_priority got an index of an empty or missing slot')
        bad = ~np.isfinite(err)
        if bad.any():
            self._nonfinite_td += int(bad.sum())
            err = np.where(bad, self._max_td, err)
        self._max_td = max(self._max_td, float(err.max()))
        self._td[idx] = err
        self._refresh(idx)

    # ------------------------------------------------------------------ sampling
    def _draw(self, n: int) -> np.ndarray:
        return self._sum.find_prefix(self._rng.random(n) * self._sum.total())

    def sample(self, batch_size: int, policy_versions: np.ndarray | None = None,
               learner_version: int | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        """
        Draw ``batch_size`` slots with replacement, weight them and count the draws.

        Staleness is judged only when both ``policy_versions`` and ``learner_version`` are
        given (see the module docstring); otherwise ``policy_lag`` is all zeros.

        :param batch_size: number of draws.
        :param policy_versions: policy version per slot (e.g. ``ReplayStorage.policy_version``).
        :param learner_version: the learner's current policy version.
        :returns: ``(indices, info)``: int64 slots and a dict with ``weights`` (float32
            importance weights, staleness included), ``probabilities`` (per-draw probability
            at draw time), ``priorities`` (``p_i`` at draw time), ``policy_lag`` (int64),
            ``stale`` (bool, lag beyond ``max_policy_lag``) and ``beta``.
        """
        batch_size = int(batch_size)
        if batch_size < 1:
            raise ValueError(f'batch_size must be >= 1, got {batch_size}')
        if self._sum.total() <= 0.0:
            raise ValueError('cannot sample: no transition is available')
        cfg = self.cfg
        beta = self.beta
        idx = self._draw(batch_size)
        judge = policy_versions is not None and learner_version is not None
        lag = np.zeros(batch_size, dtype=np.int64)
        stale = np.zeros(batch_size, dtype=bool)
        if judge:
            versions = np.asarray(policy_versions)
            lag = int(learner_version) - versions[idx].astype(np.int64)
            stale = lag > cfg.max_policy_lag
            if cfg.staleness == 'skip':
                for _ in range(cfg.skip_redraws):
                    if not stale.any():
                        break
                    self._evict(idx[stale])
                    if self._sum.total() <= 0.0:
                        break
                    redo = np.flatnonzero(stale)
                    idx[redo] = self._draw(redo.size)
                    lag[redo] = int(learner_version) - versions[idx[redo]].astype(np.int64)
                    stale[redo] = lag[redo] > cfg.max_policy_lag
                if stale.any():
                    self._evict(idx[stale])   # stale for good: out of every later draw
        total = self._sum.total()
        mass = self._sum.get(idx)
        q = mass / self.source_weight(idx)
        q_min = self._min.minimum()
        probabilities = mass / total if total > 0.0 else np.zeros_like(q)
        live = q > 0.0
        weights = np.zeros(batch_size, dtype=np.float64)
        weights[live] = (q[live] / q_min) ** -beta
        if judge and cfg.staleness == 'weight':
            excess = np.maximum(lag - cfg.max_policy_lag, 0)
            weights *= cfg.stale_weight ** excess.astype(np.float64)
        elif judge and cfg.staleness == 'skip':
            weights[stale] = 0.0
        priorities = self.priority(idx)
        slots, hits = np.unique(idx, return_counts=True)
        self._counts[slots] += hits
        self._refresh(slots)
        self._calls += 1
        info = {'weights': weights.astype(np.float32), 'probabilities': probabilities,
                'priorities': priorities, 'policy_lag': lag, 'stale': stale, 'beta': beta}
        return idx, info

    def _evict(self, indices: np.ndarray) -> None:
        idx = np.unique(indices)
        self._evictions += int((~self._evicted[idx]).sum())
        self._evicted[idx] = True
        self._refresh(idx)

    # ------------------------------------------------------------------ state
    def stats(self) -> dict[str, float]:
        """Return counters for logging: sample calls, beta, max |TD|, evictions, bad TDs."""
        return {'sample_calls': self._calls, 'beta': self.beta, 'max_td': self._max_td,
                'evicted': self._evictions, 'nonfinite_td': self._nonfinite_td,
                'total_priority': self._sum.total()}

    def _priority_key(self) -> dict[str, float]:
        return {'alpha': self.cfg.alpha, 'priority_exponent': self.cfg.priority_exponent,
                'eps': self.cfg.eps, 'real_weight': self.cfg.real_weight}

    def state_dict(self) -> dict[str, Any]:
        """
        Return a copy of the sampler: per-slot state, trees, counters and generator state.

        :returns: a dict of plain values and numpy arrays.
        """
        return {'capacity': self.capacity, 'td': self._td.copy(),
                'counts': self._counts.copy(), 'filled': self._filled.copy(),
                'evicted': self._evicted.copy(), 'source': self._source.copy(),
                'max_td': self._max_td,
                'calls': self._calls, 'evictions': self._evictions,
                'nonfinite_td': self._nonfinite_td, 'priority_key': self._priority_key(),
                'sum_tree': self._sum.state_dict(), 'min_tree': self._min.state_dict(),
                'rng': self._rng.bit_generator.state}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """
        Restore a sampler saved by :meth:`state_dict`, random generator state included.

        The trees are loaded as saved when ``alpha``, ``priority_exponent`` and ``eps`` are
        unchanged, and recomputed from the saved TD errors and counts otherwise.

        :param state: a sampler of the same capacity.
        """
        if int(state['capacity']) != self.capacity:
            raise ValueError(f'sampler of capacity {state["capacity"]} cannot be loaded into '
                             f'one of capacity {self.capacity}')
        self._td[:] = state['td']
        self._counts[:] = state['counts']
        self._filled[:] = state['filled']
        self._evicted[:] = state['evicted']
        self._source[:] = state.get('source', 0)
        self._max_td = float(state['max_td'])
        self._calls = int(state['calls'])
        self._evictions = int(state['evictions'])
        self._nonfinite_td = int(state['nonfinite_td'])
        saved_key = {'real_weight': 1.0, **dict(state['priority_key'])}
        if saved_key == self._priority_key():
            self._sum.load_state_dict(state['sum_tree'])
            self._min.load_state_dict(state['min_tree'])
        else:
            self._rebuild()
        rng_state = state['rng']
        if rng_state['bit_generator'] != self._rng.bit_generator.__class__.__name__:
            self._rng = np.random.Generator(getattr(np.random, rng_state['bit_generator'])())
        self._rng.bit_generator.state = rng_state

    def _rebuild(self) -> None:
        all_idx = np.arange(self.capacity)
        q = self.priority(all_idx)
        if self.cfg.priority_exponent != 1.0:
            q = q ** self.cfg.priority_exponent
        live = self._filled & ~self._evicted
        self._sum.set_leaves(np.where(live, q * self.source_weight(all_idx), 0.0))
        self._min.set_leaves(np.where(live, q, np.inf))


# ====================================================================== facade
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
