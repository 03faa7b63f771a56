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

"""Crafted packets with a valid CRC: each is rejected or ignored, counted, and changes nothing."""

import dataclasses
import time
import tracemalloc

from async_rl_ros.core.weights.assembler import ShardAssembler
from async_rl_ros.core.weights.codec import CodecError
from async_rl_ros.core.weights.expect import Expectation
from async_rl_ros.core.weights.sharded_weights import ShardedCommitter, ShardPacket
from conftest import BENCH, load_bench
import numpy as np
import pytest

fp = load_bench('fault_packets') if (BENCH / 'fault_packets.py').is_file() else None
needs_bench = pytest.mark.skipif(fp is None, reason='bench/ is not beside the package')


@needs_bench
@pytest.mark.parametrize('name', sorted(fp.CASES) if fp else [])
def test_a_crafted_packet_is_refused_counted_and_changes_nothing(name):
    result = fp.run_case(name)  # (the next real packet is assembled: asserted in run_case)
    assert result['accepted'] == 0, result
    assert result['counted'] >= 1 and result['reason_seen'], result
    assert result['unchanged'], result
    assert result['cpu_s'] <= 0.05, result


@needs_bench
def test_the_measure_meets_the_goals():
    result = fp.measure(quick=True)
    assert result['packets_crafted'] >= 38
    assert result['packets_accepted'] == result['packets_uncounted'] == 0
    assert result['max_packet_cpu_s'] <= 0.05


def _cluster(run_id=None, version=0, seed=0):
    from async_rl_ros.core.config import ParameterServerConfig
    rng = np.random.default_rng(seed)
    actor = {'w': rng.normal(size=(8, 5)).astype(np.float32),
             'b': rng.normal(size=8).astype(np.float32)}
    state = _state(actor, version)
    committer = ShardedCommitter(ParameterServerConfig(num_shards=2, replicas=1, chunk_size=16),
                                 state, run_id)
    return actor, committer


def _state(actor, version=0):
    import torch

    from async_rl_ros.core.records import PolicyState
    return PolicyState(actor={k: torch.as_tensor(v) for k, v in actor.items()},
                       obs_mean=np.zeros(5, np.float32), obs_std=np.ones(5, np.float32),
                       obs_clip=5.0, version=version)


def _expect(actor):
    return Expectation.of_tensors(actor, 5, num_shards=2)


def test_a_learner_restart_is_a_new_run_taken_only_from_a_full_keyframe():
    from async_rl_ros.core.weights.sharded_weights import ShardReplica
    actor, old = _cluster(run_id=1)
    shards = [ShardReplica(i, 2) for i in (0, 1)]
    assembler = ShardAssembler(expect=_expect(actor))
    for shard in shards:
        shard.apply(old.full(shard.shard_id))
        state = assembler.add(shard.weights())
    assert state.version == 0
    for step in range(5):
        actor = {k: v + 0.1 for k, v in actor.items()}
        for shard, sp in zip(shards, old.commit(_state(actor))):
            shard.apply(sp)
            state = assembler.add(shard.weights()) or state
    assert assembler.version == state.version == 5 and assembler.run_id == 1
    _, new = _cluster(run_id=2)  # restarted from version 0
    fresh = [ShardReplica(i, 2) for i in (0, 1)]
    for shard in fresh:
        shard.apply(new.full(shard.shard_id))
    for shard, sp in zip(fresh, new.commit(_state({k: v * 2 for k, v in actor.items()}))):
        shard.apply(sp)
    assert fresh[0].weights().packet.is_delta
    with pytest.raises(CodecError) as err:  # a new run's delta: refused
        assembler.add(fresh[0].weights())
    assert err.value.reason == 'run_id' and assembler.version == 5
    assert assembler.add(fresh[0].keyframe()) is None  # a new run's keyframe: taken
    assert assembler.version == -1 and assembler.run_id == 2  # versions reset
    state = assembler.add(fresh[1].keyframe())
    assert state is not None and state.version == 0
    assert assembler.add(fresh[0].weights()) is None  # the new run's delta, on its keyframe
    assert assembler.add(fresh[1].weights()).version == 1
    with pytest.raises(CodecError) as err:  # the replaced run cannot come back
        assembler.add(shards[1].weights())
    assert err.value.reason == 'run_id'
    rejected = assembler.rejected['run_id'] + sum(d.rejected['run_id']
                                                  for d in assembler.decoders.values())
    assert rejected == 2
    assert assembler.accepted == 2 + 10 + 4  # none of the old run's counts were lost


def test_the_run_id_travels_in_the_bytes_and_in_the_crc():
    actor, committer = _cluster(run_id=0xDEADBEEF12345678)
    sp = committer.full(0)
    back = ShardPacket.from_bytes(sp.to_bytes())
    assert back.run_id == 0xDEADBEEF12345678
    with pytest.raises(CodecError) as err:
        dataclasses.replace(sp, run_id=1).verify()
    assert err.value.reason == 'crc'
    assert _cluster()[1].run_id != _cluster()[1].run_id  # random per committer


@pytest.mark.parametrize('expect', [True, False])
def test_a_huge_declared_layout_is_rejected_without_allocating(expect):
    actor, committer = _cluster()
    assembler = ShardAssembler(5, _expect(actor) if expect else None)
    sp = committer.full(0)
    for shape in ((10 ** 6, 10 ** 6), (10 ** 5, 10 ** 5)):
        huge = dataclasses.replace(sp, layout={'w': shape}).seal()
        data = huge.to_bytes()
        tracemalloc.start()
        start = time.process_time()
        with pytest.raises(CodecError) as err:
            assembler.add(ShardPacket.from_bytes(data))
        cpu = time.process_time() - start
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert err.value.reason == 'layout'
        assert peak < 1 << 20 and cpu < 0.05, (peak, cpu)
    assert assembler.version == -1 and not assembler.decoders
    assert assembler.rejected['layout'] == 2


def test_without_an_expectation_the_first_layout_is_pinned():
    actor, committer = _cluster()
    assembler = ShardAssembler(5)
    assembler.add(committer.full(0))
    other = dataclasses.replace(committer.full(1), layout={'w': (9, 5), 'b': (9,)}).seal()
    with pytest.raises(CodecError) as err:
        assembler.add(other)
    assert err.value.reason == 'layout'
    other = dataclasses.replace(other, run_id=committer.run_id + 1).seal()  # even a new run
    with pytest.raises(CodecError) as err:
        assembler.add(other)
    assert err.value.reason == 'layout'


def test_a_packet_already_held_is_ignored_and_counted():
    actor, committer = _cluster()
    assembler = ShardAssembler(5, _expect(actor))
    sp = committer.full(0)
    assembler.add(sp)
    assert assembler.add(sp) is None
    assert assembler.ignored['stale'] == 1 and assembler.rejected_total == 0


def test_the_expectation_comes_from_the_worker_policy():
    from async_rl_ros.core.workers.env_worker import WorkerPolicy
    policy = WorkerPolicy(5, 2, (8,))
    expect = Expectation.of_policy(policy, num_shards=2)
    assert expect.obs_dim == 5 and expect.num_shards == 2
    assert expect.layout == {k: tuple(v.shape) for k, v in policy.actor.state_dict().items()}
    with pytest.raises(ValueError):
        Expectation.of_tensors({'w': np.zeros(3, np.float64)})
