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

"""Committer, shard replicas and assembler: deltas on keyframes, re-syncs, rejected packets."""

import dataclasses

from async_rl_ros.core.config import ParameterServerConfig
from async_rl_ros.core.records import PolicyState
from async_rl_ros.core.weights.assembler import ShardAssembler
from async_rl_ros.core.weights.codec import CodecConfig, CodecError
from async_rl_ros.core.weights.parameter_server import Partition
from async_rl_ros.core.weights.sharded_weights import (chunk_shape, ShardedCommitter, ShardPacket,
                                                       ShardReplica)
import numpy as np
import pytest
import torch


def _actor(rng, scale=1.0):
    return {'trunk.0.weight': scale * rng.normal(size=(64, 21)).astype(np.float32),
            'trunk.0.bias': scale * rng.normal(size=64).astype(np.float32),
            'mean_head.weight': scale * rng.normal(size=(6, 64)).astype(np.float32),
            'log_alpha': np.float32(scale) * np.ones((), np.float32)}


def _state(actor, version=0, clip=5.0, std=None):
    return PolicyState(actor={k: torch.as_tensor(np.array(v)) for k, v in actor.items()},
                       obs_mean=np.zeros(21, np.float32),
                       obs_std=np.ones(21, np.float32) if std is None else std,
                       obs_clip=clip, version=version)


def _cluster(num_shards=3, replicas=2, chunk=500, codec=None):
    rng = np.random.default_rng(0)
    cfg = ParameterServerConfig(num_shards=num_shards, replicas=replicas, chunk_size=chunk)
    actor = _actor(rng)
    committer = ShardedCommitter(cfg, _state(actor))
    shards = [ShardReplica(i, num_shards, codec) for i in range(num_shards)]
    for shard in shards:
        shard.apply(committer.full(shard.shard_id))
    return rng, actor, committer, shards


def _step(rng, actor, scale=0.01):
    return {k: v + scale * rng.normal(size=np.shape(v)).astype(np.float32)
            for k, v in actor.items()}


def test_chunk_shape_keeps_rows_when_aligned():
    assert chunk_shape(Partition('w#0', 'w', 0, 42), (4, 21)) == (2, 21)
    assert chunk_shape(Partition('w#1', 'w', 42, 50), (4, 21)) == (8,)
    assert chunk_shape(Partition('b#0', 'b', 0, 4), (4,)) == (4,)


def test_commits_reach_every_replica_as_deltas_and_workers_assemble_the_policy():
    rng, actor, committer, shards = _cluster()
    assembler = ShardAssembler(obs_dim=21)
    for step in range(4):
        actor = _step(rng, actor)
        packets = committer.commit(_state(actor))
        assert [p.shard_id for p in packets] == [0, 1, 2]
        for shard, packet in zip(shards, packets):
            shard.apply(packet)
            assert shard.version == committer.version == step + 1
            served = shard.weights()
            assert served.packet.is_delta and served.packet.base_version == 0
            assert shard.keyframe().packet.version == 0
        state = None
        for shard in shards:
            state = assembler.add_latest(shard.weights(), shard.keyframe()) or state
        assert state is not None and state.version == step + 1
        assert state.run_id == committer.run_id  # versions are ordered within this run
    for name, value in actor.items():
        step = (np.abs(value).max() + 1e-12) / 127  # int8: half a step of the row range
        np.testing.assert_allclose(state.actor[name].numpy(), value, atol=step, err_msg=name)
    assert state.obs_clip == 5.0
    assert committer.commit(_state(actor)) is None  # nothing changed: nothing to send


def test_keyframes_every_full_every_packets_and_full_packets_when_delta_is_off():
    for cfg, kinds in ((CodecConfig(full_every=3), [True, True, False, True, True]),
                       (CodecConfig(delta=False), [False] * 5)):
        rng, actor, committer, shards = _cluster(num_shards=2, codec=cfg)
        got = []
        for _ in range(5):
            actor = _step(rng, actor)
            packets = committer.commit(_state(actor))
            shards[0].apply(packets[0])
            got.append(shards[0].weights().packet.is_delta)
        assert got == kinds


def test_replicas_let_workers_assemble_without_a_dead_shard():
    rng, actor, committer, shards = _cluster(num_shards=3, replicas=2)
    packets = committer.commit(_state({k: v + 1.0 for k, v in actor.items()}))
    assembler = ShardAssembler()
    results = []
    for shard, packet in list(zip(shards, packets))[:2]:
        shard.apply(packet)
        assembler.add(shard.keyframe())
        results.append(assembler.add(shard.weights()))
    assert results[-1] is not None and results[-1].version == 1


def test_bad_commits_are_refused_counted_and_change_nothing():
    rng, actor, committer, shards = _cluster()
    packets = committer.commit(_state({k: v * 2 for k, v in actor.items()}))
    shard = shards[0]
    before = shard.weights().packet.to_bytes()
    corrupt = dataclasses.replace(packets[0], packet=dataclasses.replace(
        packets[0].packet, crc32=packets[0].packet.crc32 ^ 1))
    with pytest.raises(CodecError) as err:
        shard.apply(corrupt)
    assert err.value.reason == 'crc'
    with pytest.raises(CodecError) as err:
        shard.apply(dataclasses.replace(packets[0], chunk_size=7))  # outside the CRC before
    assert err.value.reason == 'crc'
    with pytest.raises(CodecError) as err:
        shard.apply(packets[1])  # another shard's
    assert err.value.reason == 'format'
    assert shard.weights().packet.to_bytes() == before
    assert shard.rejected['crc'] == 2 and shard.rejected['format'] == 1
    shard.apply(packets[0])
    later = committer.commit(_state({k: v * 3 for k, v in actor.items()}))
    fresh = ShardReplica(1, 3)  # a respawned shard: a delta cannot apply ...
    with pytest.raises(CodecError) as err:
        fresh.apply(later[1])
    assert err.value.reason == 'base_version'
    fresh.apply(committer.full(1))  # ... a full commit re-syncs it
    assert fresh.version == committer.version == 2
    assert not fresh.weights().packet.is_delta
    # A state a worker could not act with is never committed.
    assert committer.commit(_state(actor, std=np.zeros(21, np.float32))) is None
    assert committer.refused == 1 and committer.version == 2


def test_corrupt_layout_is_rejected_before_the_assembler_resets_anything():
    rng, actor, committer, shards = _cluster(num_shards=2, replicas=2)
    assembler = ShardAssembler()
    state = assembler.add(shards[0].weights())
    assert state is not None and state.version == 0
    good = shards[1].weights()
    for bad in (dataclasses.replace(good, layout={**good.layout, 'x': (3,)}),
                dataclasses.replace(good, chunk_size=good.chunk_size + 1),
                dataclasses.replace(good, shard_id=0)):
        with pytest.raises(CodecError) as err:
            assembler.add(bad)
        assert err.value.reason == 'crc'
    assert assembler.version == 0 and set(assembler.decoders) == {0}
    assert assembler.decoders[0].version == 0 and assembler.rejected['crc'] == 3
    wire = good.to_bytes()
    assert ShardPacket.from_bytes(wire).packet.crc32 == good.packet.crc32
    flipped = bytearray(wire)
    flipped[8] ^= 1  # inside the layout
    with pytest.raises(CodecError):
        ShardPacket.from_bytes(bytes(flipped))


@pytest.mark.parametrize('extra, value', [('obs_mean', np.full(21, np.nan, np.float32)),
                                          ('obs_std', np.zeros(21, np.float32)),
                                          ('obs_clip', np.float32(-1.0))])
def test_bad_extras_with_a_valid_crc_are_rejected_and_change_nothing(extra, value):
    rng, actor, committer, shards = _cluster(num_shards=2, replicas=2)
    assembler = ShardAssembler()
    assembler.add(shards[0].weights())
    decoder = assembler.decoders[0]
    before = (decoder.version, decoder.key_version, decoder.tensors, decoder.extras)
    actor = _step(rng, actor)
    shards[0].apply(committer.commit(_state(actor))[0])
    good = shards[0].weights()
    packet = dataclasses.replace(good.packet, extras={**good.packet.extras, extra: value})
    bad = dataclasses.replace(good, packet=packet).seal()  # a valid CRC
    with pytest.raises(CodecError) as err:
        assembler.add(bad)
    assert err.value.reason == 'extras'
    after = (decoder.version, decoder.key_version, decoder.tensors, decoder.extras)
    assert after[:2] == before[:2] and decoder.rejected['extras'] == 1
    for a, b in zip(before[2:], after[2:]):
        assert all(np.array_equal(a[k], b[k]) for k in a)
    assert assembler.add(good).version == 1  # the good packet still applies


def test_a_respawned_shard_serves_a_keyframe_at_the_version_workers_hold():
    rng, actor, committer, shards = _cluster(num_shards=2, replicas=2)
    assembler = ShardAssembler()
    actor = _step(rng, actor)
    for shard, packet in zip(shards, committer.commit(_state(actor))):
        shard.apply(packet)
    assembler.add(shards[1].keyframe())
    assert assembler.add(shards[1].weights()).version == 1
    respawned = ShardReplica(1, 2)
    respawned.apply(committer.full(1))  # same version 1, a new keyframe
    assert assembler.lacks_base(respawned.weights()) is False
    assert assembler.add(respawned.weights()) is None  # re-based, nothing new to assemble
    actor = _step(rng, actor)
    respawned.apply(committer.commit(_state(actor))[1])
    assert not assembler.lacks_base(respawned.weights())
    assert assembler.add(respawned.weights()).version == 2


def test_a_shard_that_refused_a_duplicate_commit_is_resynced_at_its_version():
    rng, actor, committer, shards = _cluster(num_shards=2, replicas=2)
    packets = committer.commit(_state(_step(rng, actor)))
    shards[0].apply(packets[0])
    served = shards[0].weights()
    with pytest.raises(CodecError) as err:
        shards[0].apply(packets[0])  # a duplicate: the shard asks for a full commit ...
    assert err.value.reason == 'version'
    shards[0].apply(committer.full(0))  # ... which applies at the same version
    assert shards[0].version == 1 and shards[0].weights() is served
