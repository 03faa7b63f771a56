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

"""Partitions of the model and their replica shards on the hash ring."""

from async_rl_ros.core.config import ConfigError, ParameterServerConfig
from async_rl_ros.core.weights.hash_ring import HashRing
from async_rl_ros.core.weights.parameter_server import Partition, partition_layout, placement
import pytest


def test_config_defaults_and_checks():
    cfg = ParameterServerConfig()
    assert (cfg.num_shards, cfg.replicas, cfg.virtual_nodes, cfg.chunk_size,
            cfg.commit_every) == (2, 2, 128, 16384, 8)
    with pytest.raises(ConfigError, match='replicas'):
        ParameterServerConfig.from_flat({'num_shards': 2, 'replicas': 3})
    with pytest.raises(ConfigError, match='commit_every'):
        ParameterServerConfig.from_flat({'commit_every': 0})
    assert ParameterServerConfig.from_flat({'commit_every': 1}).commit_every == 1
    with pytest.raises(ConfigError, match='replicas'):
        placement([], ParameterServerConfig(num_shards=1, replicas=2))


def test_partition_layout_covers_every_tensor_in_chunks():
    shapes = {'actor/trunk.0.weight': (256, 300), 'b': (5,), 'scalar': (), 'empty': (0, 3)}
    layout = partition_layout(shapes, 16384)
    by_tensor = {}
    for part in layout:
        by_tensor.setdefault(part.tensor, []).append(part)
    big = by_tensor['actor/trunk.0.weight']
    assert [p.key for p in big] == [f'actor/trunk.0.weight#{i}' for i in range(5)]
    assert [(p.start, p.stop) for p in big] == [(0, 16384), (16384, 32768), (32768, 49152),
                                                (49152, 65536), (65536, 76800)]
    assert by_tensor['b'] == [Partition('b#0', 'b', 0, 5)]
    assert by_tensor['scalar'] == [Partition('scalar#0', 'scalar', 0, 1)]
    assert by_tensor['empty'] == [Partition('empty#0', 'empty', 0, 0)]
    assert len({p.key for p in layout}) == len(layout)
    # Keys do not depend on the order of the tensors.
    again = partition_layout(dict(reversed(list(shapes.items()))), 16384)
    assert sorted(again, key=lambda p: p.key) == sorted(layout, key=lambda p: p.key)
    with pytest.raises(ValueError, match='chunk'):
        partition_layout(shapes, 0)


def test_placement_puts_every_partition_on_distinct_ring_shards():
    cfg = ParameterServerConfig(num_shards=4, replicas=2, chunk_size=64)
    layout = partition_layout({'w': (64, 40), 'b': (64,), 'a': ()}, cfg.chunk_size)
    where = placement(layout, cfg)
    ring = HashRing(cfg.virtual_nodes)
    for i in range(4):
        ring.add_node(f'shard_{i}')
    assert set(where) == {p.key for p in layout}
    for key, shards in where.items():
        assert len(set(shards)) == 2 and all(0 <= s < 4 for s in shards)
        assert [f'shard_{s}' for s in shards] == ring.nodes_for(key, 2)
    assert len({s for shards in where.values() for s in shards}) == 4  # every shard is used
    single = placement(layout, ParameterServerConfig(num_shards=1, replicas=1))
    assert all(shards == [0] for shards in single.values())
