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
Where the weights live in the sharded parameter server: partitions and their replica shards.

The flattened float32 tensors of the model are cut into :class:`Partition` s of at most
``chunk_size`` floats (:func:`partition_layout`), so a big layer spreads over several shards.
Partition keys are ``'<tensor name>#<chunk index>'`` (``'trunk.0.weight#3'``), independent of
the order of the tensors. :func:`placement` maps each key with a
:class:`~async_rl_ros.core.weights.hash_ring.HashRing` (virtual nodes) to ``replicas``
distinct shards (the primary and the next distinct shards clockwise); every replica stores the
whole partition. The committer, the shard replicas and the workers of
:mod:`async_rl_ros.core.weights.sharded_weights` all route with these two functions.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

from async_rl_ros.core.config import ParameterServerConfig
from async_rl_ros.core.weights.hash_ring import HashRing
import numpy as np

__all__ = ['ParameterServerConfig', 'Partition', 'partition_layout', 'placement']


@dataclasses.dataclass(frozen=True)
class Partition:
    """
    A contiguous chunk ``[start, stop)`` of one flattened tensor.

    :param key: ``'<tensor>#<chunk index>'``, the key placed on the hash ring.
    :param tensor: the tensor name.
    :param start: first flat index (inclusive).
    :param stop: last flat index (exclusive).
    """

    key: str
    tensor: str
    start: int
    stop: int

    @property
    def size(self) -> int:
        """Return the number of floats in the partition."""
        return self.stop - self.start


def partition_layout(shapes: Mapping[str, Sequence[int]], chunk: int) -> list[Partition]:
    """
    Cut every flattened tensor into partitions of at most ``chunk`` floats.

    A tensor of ``n`` floats gets ``ceil(n / chunk)`` partitions (one empty partition when
    ``n == 0``, so it still exists on the shards). Keys depend only on the tensor name and the
    chunk index, never on the order of ``shapes``.

    :param shapes: tensor name -> shape.
    :param chunk: largest partition, in floats (>= 1).
    :returns: the partitions, tensor by tensor in the order of ``shapes``.
    """
    if int(chunk) != chunk or chunk < 1:
        raise ValueError(f'chunk must be an integer >= 1, got {chunk!r}')
    chunk = int(chunk)
    layout: list[Partition] = []
    for name, shape in shapes.items():
        size = int(np.prod(tuple(shape), dtype=np.int64))
        starts = range(0, size, chunk) if size else range(1)
        for index, start in enumerate(starts):
            layout.append(Partition(f'{name}#{index}', name, start, min(start + chunk, size)))
    return layout


def placement(layout: Sequence[Partition], cfg: ParameterServerConfig) -> dict[str, list[int]]:
    """
    Return the shards holding each partition, primary first.

    :param layout: the partitions.
    :param cfg: ``num_shards``, ``replicas`` and ``virtual_nodes``.
    :returns: ``{partition key: [shard indices]}`` as the hash ring places them.
    """
    cfg.validate()
    ring = HashRing(cfg.virtual_nodes)
    names = {f'shard_{i}': i for i in range(cfg.num_shards)}
    for name in names:
        ring.add_node(name)
    return {p.key: [names[n] for n in ring.nodes_for(p.key, cfg.replicas)] for p in layout}
