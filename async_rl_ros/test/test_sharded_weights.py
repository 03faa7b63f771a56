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

"""Learner commits split per shard, shard replicas and worker-side assembly (no ROS)."""

import dataclasses

from async_rl_ros.core.config import ParameterServerConfig
from async_rl_ros.core.weights.codec import CodecError
from async_rl_ros.core.weights.parameter_server import Partition
from async_rl_ros.core.weights.sharded_weights import (chunk_shape, ShardAssembler,
                                                       ShardedCommitter, ShardReplica)
import numpy as np
import pytest


def _actor(rng, scale=1.0):
    return {'trunk.0.weight': scale * rng.normal(size=(64, 21)).astype(np.float32),
            'trunk.0.bias': scale * rng.normal(size=64).astype(np.float32),
            'mean_head.weight': scale * rng.normal(size=(6, 64)).astype(np.float32),
            'log_alpha': np.float32(scale) * np.ones((), np.float32)}


EXTRAS = {'obs_mean': np.zeros(21, np.float32), 'obs_std': np.ones(21, np.float32),
          'obs_clip': np.float32(5.0)}


def _cluster(num_shards=3, replicas=2, chunk=500):
    rng = np.random.default_rng(0)
    cfg = ParameterServerConfig(num_shards=num_shards, replicas=replicas, chunk_size=chunk,
                                commit_every=1)
    actor = _actor(rng)
    committer = ShardedCommitter(cfg, actor, version=0)
    shards = [ShardReplica(i, num_shards) for i in range(num_shards)]
    for shard in shards:
        shard.apply(committer.full(shard.shard_id, EXTRAS))
    return rng, actor, committer, shards


def test_chunk_shape_keeps_rows_when_aligned():
    assert chunk_shape(Partition('w#0', 'w', 0, 42), (4, 21)) == (2, 21)
    assert chunk_shape(Partition('w#1', 'w', 42, 50), (4, 21)) == (8,)
    assert chunk_shape(Partition('b#0', 'b', 0, 4), (4,)) == (4,)


def test_commits_reach_every_replica_and_workers_assemble_the_policy():
    rng, actor, committer, shards = _cluster()
    assembler = ShardAssembler()
    for step in range(3):
        actor = {k: v + 0.01 * rng.normal(size=np.shape(v)).astype(np.float32)
                 for k, v in actor.items()}
        packets = committer.commit(actor, EXTRAS)
        assert [p.shard_id for p in packets] == [0, 1, 2]
        for shard, packet in zip(shards, packets):
            shard.apply(packet)
            assert shard.version == committer.version == step + 1
        state = None
        for shard in shards:
            state = assembler.add(shard.weights()) or state
        assert state is not None and state.version == step + 1
    _, server_actor = committer.server.read()
    for name, value in server_actor.items():
        got = state.actor[name].numpy()
        step = (np.abs(value).max() + 1e-12) / 127  # int8: half a step of the row range
        np.testing.assert_allclose(got, value, atol=step, err_msg=name)
    assert state.obs_clip == 5.0
    np.testing.assert_array_equal(state.obs_std, EXTRAS['obs_std'])


def test_replicas_let_workers_assemble_without_a_dead_shard():
    rng, actor, committer, shards = _cluster(num_shards=3, replicas=2)
    packets = committer.commit({k: v + 1.0 for k, v in actor.items()}, EXTRAS)
    assembler = ShardAssembler()
    results = []
    for shard, packet in list(zip(shards, packets))[:2]:
        shard.apply(packet)
        results.append(assembler.add(shard.weights()))
    assert results[-1] is not None and results[-1].version == 1


def test_bad_commits_are_refused_counted_and_change_nothing():
    rng, actor, committer, shards = _cluster()
    packets = committer.commit({k: v * 2 for k, v in actor.items()}, EXTRAS)
    shard = shards[0]
    before = shard.weights().packet.to_bytes()
    corrupt = dataclasses.replace(packets[0], packet=dataclasses.replace(
        packets[0].packet, crc32=packets[0].packet.crc32 ^ 1))
    with pytest.raises(CodecError) as err:
        shard.apply(corrupt)
    assert err.value.reason == 'crc'
    with pytest.raises(CodecError) as err:
        shard.apply(packets[1])  # another shard's
    assert err.value.reason == 'format'
    assert shard.weights().packet.to_bytes() == before
    assert shard.rejected['crc'] == 1 and shard.rejected['format'] == 1
    shard.apply(packets[0])
    later = committer.commit({k: v * 3 for k, v in actor.items()}, EXTRAS)
    fresh = ShardReplica(1, 3)  # a respawned shard: a delta cannot apply ...
    with pytest.raises(CodecError) as err:
        fresh.apply(later[1])
    assert err.value.reason == 'base_version'
    fresh.apply(committer.full(1, EXTRAS))  # ... a full commit re-syncs it
    assert fresh.version == committer.version == 2


def test_assembler_rejects_corrupt_and_old_packets():
    rng, actor, committer, shards = _cluster()
    assembler = ShardAssembler()
    good = shards[0].weights()
    bad = dataclasses.replace(good, packet=dataclasses.replace(good.packet,
                                                               crc32=good.packet.crc32 ^ 4))
    with pytest.raises(CodecError):
        assembler.add(bad)
    assert assembler.add(shards[0].weights()) is None  # shard 0 alone is not the whole model
    with pytest.raises(CodecError) as err:
        assembler.add(shards[0].weights())  # the same version again from that shard
    assert err.value.reason == 'version'
    for shard in shards[1:]:
        assembler.add(shard.weights())
    assert assembler.version == 0
    assert assembler.rejected_total == 2 and assembler.accepted == 2  # shard 2: redundant
