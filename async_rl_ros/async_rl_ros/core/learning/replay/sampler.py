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
Count-aware prioritized sampler: priorities, draws, importance weights and staleness.

The priority of slot ``i`` is::

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
A :class:`SumTree` (sampling by prefix sums) and a :class:`MinTree` (``q_min``) keep sampling
and updates at O(log n), see :mod:`.segment_tree`.

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

from typing import Any, Mapping

from async_rl_ros.core.config import ReplayConfig
from async_rl_ros.core.learning.replay.segment_tree import MinTree, SumTree
from async_rl_ros.core.records import SOURCES
import numpy as np


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
        #: slots whose draw counts changed since the trees last saw them (see :meth:`sample`)
        self._unsettled = np.zeros(0, dtype=np.int64)
        self._calls = 0
        self._evictions = 0
        self._nonfinite_td = 0

    # ------------------------------------------------------------------ priorities
    @property
    def sum_tree(self) -> SumTree:
        """Return the sum tree over ``q_i`` (0 for empty and evicted slots)."""
        self._settle()
        return self._sum

    @property
    def min_tree(self) -> MinTree:
        """Return the min tree over ``q_i`` (+inf for empty and evicted slots)."""
        self._settle()
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
        self._settle()
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

    def _settle(self) -> None:
        """Refresh the slots drawn by the last :meth:`sample` whose TD errors have not come."""
        if self._unsettled.size:
            idx, self._unsettled = self._unsettled, self._unsettled[:0]
            self._refresh(idx)

    def on_insert(self, indices: np.ndarray, sources: np.ndarray | None = None) -> None:
        """
        Register new transitions: count 0, TD term at the running maximum, not evicted.

        :param indices: slots just written (repeats allowed).
        :param sources: index in :data:`SOURCES` of each (all simulated when omitted).
        """
        self._settle()
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
        # One refresh for the new TD errors and the draw counts of the last sample.
        idx, self._unsettled = np.union1d(self._unsettled, idx), self._unsettled[:0]
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
        self._settle()
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
        # The trees see the new counts with the TD errors that follow (update_priority): one
        # refresh of these slots instead of two. Whatever reads the trees first settles them.
        self._unsettled = slots
        self._calls += 1
        info = {'weights': weights.astype(np.float32), 'probabilities': probabilities,
                'priorities': priorities, 'policy_lag': lag, 'stale': stale, 'beta': beta}
        return idx, info

    def _evict(self, indices: np.ndarray) -> None:
        self._settle()
        idx = np.unique(indices)
        self._evictions += int((~self._evicted[idx]).sum())
        self._evicted[idx] = True
        self._refresh(idx)

    # ------------------------------------------------------------------ state
    def stats(self) -> dict[str, float]:
        """Return counters for logging: sample calls, beta, max |TD|, evictions, bad TDs."""
        self._settle()
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
        self._settle()
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
        self._unsettled = self._unsettled[:0]
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
