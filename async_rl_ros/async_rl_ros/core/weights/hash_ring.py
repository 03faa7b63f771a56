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
Consistent-hash ring with virtual nodes: which parameter-server shards hold a partition.

Every physical node (a shard id) is placed on a 64-bit ring at ``virtual_nodes`` points, the
hashes of ``'<node_id>/<i>'``. A key is hashed onto the same ring and belongs to the first
point at or after its hash, walking clockwise (wrapping at ``2**64``); its ``r`` replicas are
the first ``r`` *distinct* physical nodes met on that walk. Consequences:

* adding a node only moves keys to the new node (its points split arcs that other nodes
  owned), and removing one only moves the keys it owned, each to the next node clockwise, so
  about ``1/n`` of the keys move either way;
* with many virtual nodes every node owns close to ``1/n`` of the ring (the share of one node
  has a relative spread of about ``1/sqrt(virtual_nodes)``);
* the replica set of a key changes on a join only by the new node entering it (and the last
  member leaving it), and on a leave only by the leaving node being replaced.

The hash is :func:`stable_hash` (BLAKE2b, 8-byte digest), never Python's ``hash()``, which is
salted per process: every process (learner, shards, actors) must compute the same placement.
The ring is a plain object without a lock; its owner (the parameter server) serializes
membership changes and lookups.
"""

from __future__ import annotations

import bisect
import hashlib
from typing import Callable, Iterator

__all__ = ['EmptyRingError', 'HashRing', 'stable_hash']


class EmptyRingError(LookupError):
    """A lookup was made on a ring without nodes."""


def stable_hash(key: str) -> int:
    """
    Hash a string to a 64-bit unsigned integer, identically in every process and platform.

    :param key: the string to place on the ring.
    :returns: the first 8 bytes of its BLAKE2b digest, big-endian, in ``[0, 2**64)``.
    """
    digest = hashlib.blake2b(key.encode('utf-8'), digest_size=8).digest()
    return int.from_bytes(digest, 'big')


class HashRing:
    """
    Consistent-hash ring mapping string keys to string node ids, with virtual nodes.

    :param virtual_nodes: points each physical node occupies on the ring (more points, better
        balance: the relative spread of the per-node share is about ``1/sqrt(virtual_nodes)``).
    :param hash_fn: ``str -> int`` hash; must be stable across processes.
    """

    def __init__(self, virtual_nodes: int = 128, hash_fn: Callable[[str], int] = stable_hash):
        if int(virtual_nodes) != virtual_nodes or virtual_nodes < 1:
            raise ValueError(f'virtual_nodes must be an integer >= 1, got {virtual_nodes!r}')
        self._virtual_nodes = int(virtual_nodes)
        self._hash_fn = hash_fn
        self._nodes: dict[str, list[int]] = {}
        self._points: list[int] = []
        self._owners: list[str] = []

    # ------------------------------------------------------------------ membership
    @property
    def virtual_nodes(self) -> int:
        """Return the number of ring points per physical node."""
        return self._virtual_nodes

    @property
    def nodes(self) -> tuple[str, ...]:
        """Return the physical node ids, sorted."""
        return tuple(sorted(self._nodes))

    def __len__(self) -> int:
        """Return the number of physical nodes."""
        return len(self._nodes)

    def __contains__(self, node_id: object) -> bool:
        """Return whether ``node_id`` is a physical node of the ring."""
        return node_id in self._nodes

    def __iter__(self) -> Iterator[str]:
        """Iterate over the physical node ids, sorted."""
        return iter(self.nodes)

    def add_node(self, node_id: str) -> None:
        """
        Place a physical node on the ring at its ``virtual_nodes`` points.

        :param node_id: a non-empty string, unique on the ring.
        :raises ValueError: if the node is already on the ring.
        """
        if not isinstance(node_id, str) or not node_id:
            raise TypeError(f'node ids are non-empty strings, got {node_id!r}')
        if node_id in self._nodes:
            raise ValueError(f'node {node_id!r} is already on the ring')
        self._nodes[node_id] = [self._hash_fn(f'{node_id}/{i}')
                                for i in range(self._virtual_nodes)]
        self._rebuild()

    def remove_node(self, node_id: str) -> None:
        """
        Take a physical node and all its points off the ring.

        :param node_id: a node of the ring.
        :raises KeyError: if the node is not on the ring.
        """
        if node_id not in self._nodes:
            raise KeyError(f'node {node_id!r} is not on the ring (nodes: {list(self.nodes)})')
        del self._nodes[node_id]
        self._rebuild()

    def _rebuild(self) -> None:
        # Ties between equal hashes (vanishingly rare with 64 bits) are broken by node id, so
        # the order never depends on insertion order.
        pairs = sorted((point, node) for node, points in self._nodes.items() for point in points)
        self._points = [point for point, _ in pairs]
        self._owners = [node for _, node in pairs]

    # ------------------------------------------------------------------ lookup
    def nodes_for(self, key: str, replicas: int = 1) -> list[str]:
        """
        Return the nodes that hold ``key``: the first distinct nodes clockwise from its hash.

        :param key: the key (a partition key such as ``'actor/trunk.0.weight#3'``).
        :param replicas: how many distinct nodes to return; all nodes when the ring has fewer.
        :returns: distinct node ids, primary first.
        :raises EmptyRingError: if the ring has no node.
        """
        if replicas < 1:
            raise ValueError(f'replicas must be >= 1, got {replicas}')
        if not self._points:
            raise EmptyRingError(f'cannot place key {key!r}: the hash ring has no nodes')
        want = min(int(replicas), len(self._nodes))
        count = len(self._points)
        start = bisect.bisect_left(self._points, self._hash_fn(key))
        found: list[str] = []
        for step in range(count):
            owner = self._owners[(start + step) % count]
            if owner not in found:
                found.append(owner)
                if len(found) == want:
                    break
        return found

    def node_for(self, key: str) -> str:
        """
        Return the primary node of ``key``.

        :param key: the key to place.
        :returns: the first node clockwise from the key's hash.
        :raises EmptyRingError: if the ring has no node.
        """
        return self.nodes_for(key, 1)[0]

    def shares(self) -> dict[str, float]:
        """
        Return the fraction of the hash space each node owns as primary.

        :returns: ``{node_id: fraction}``; the fractions sum to 1 (empty for an empty ring).
        """
        if not self._points:
            return {}
        size = float(2**64)
        out = dict.fromkeys(self._nodes, 0.0)
        # The arc (previous point, point] belongs to the point's owner; the first arc wraps.
        previous = self._points[-1] - 2**64
        for point, owner in zip(self._points, self._owners):
            out[owner] += (point - previous) / size
            previous = point
        return out
