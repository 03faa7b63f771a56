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
Segment trees of the prioritized sampler: sums for prefix-sum draws, minima for ``q_min``.

Both keep sampling and updates at O(log n) and are updated and searched for a whole batch at
once, one tree level per numpy operation.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np


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
