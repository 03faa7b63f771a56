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

"""Tests of the sharded, replicated parameter server and the delayed-update accumulator."""

import threading

from async_rl_ros.core.config import ConfigError
from async_rl_ros.core.weights.hash_ring import HashRing
from async_rl_ros.core.weights.parameter_server import (CommitAccumulator, ParameterServer,
                                                        ParameterServerConfig, ParameterShard,
                                                        Partition, partition_layout,
                                                        PartitionUnavailableError,
                                                        StaleCommitError, VersionError)
import numpy as np
import pytest


def _model(seed=0):
    rng = np.random.default_rng(seed)
    return {
        'actor/trunk.0.weight': rng.standard_normal((64, 40)).astype(np.float32),
        'actor/trunk.0.bias': rng.standard_normal(64).astype(np.float32),
        'critic/q1.0.weight': rng.standard_normal((100, 30)).astype(np.float32),
        'log_alpha': np.array(-1.5, dtype=np.float32),
    }


def _server(num_shards=4, replicas=2, chunk_size=64, virtual_nodes=128, tensors=None):
    cfg = ParameterServerConfig(num_shards=num_shards, replicas=replicas,
                                chunk_size=chunk_size, virtual_nodes=virtual_nodes)
    server = ParameterServer(cfg)
    server.initialize(_model() if tensors is None else tensors)
    return server


def _same(a, b):
    """Bitwise equality of two float32 tensor dicts (also tells -0.0 from 0.0)."""
    assert set(a) == set(b)
    for name in a:
        assert a[name].dtype == np.float32 and a[name].shape == b[name].shape, name
        assert a[name].tobytes() == b[name].tobytes(), name
    return True


def _delta(seed, scale=1e-2):
    rng = np.random.default_rng(seed)
    return {n: (scale * rng.standard_normal(v.shape)).astype(np.float32)
            for n, v in _model().items()}


def _check_shards_match_assignment(server):
    """Every live shard holds exactly its assigned partitions, at the server version."""
    assignment = server.assignment()
    for shard_id in server.shard_ids:
        shard = server.shard(shard_id)
        expected = sorted(k for k, ids in assignment.items() if shard_id in ids)
        assert list(shard.keys) == expected, shard_id
        for key in expected:
            assert shard.version_of(key) == server.version


# ====================================================================== config and layout
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
        ParameterServer(ParameterServerConfig(num_shards=1, replicas=2))


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


# ====================================================================== round trip
def test_initialize_read_round_trip_is_exact_and_spreads_a_big_layer():
    rng = np.random.default_rng(1)
    weight = rng.standard_normal((256, 300)).astype(np.float32)
    weight[0, :4] = [-0.0, np.float32(1e-45), np.finfo(np.float32).max, -1e-38]
    tensors = {'actor/trunk.0.weight': weight,
               'actor/trunk.0.bias': rng.standard_normal(256).astype(np.float32),
               'log_alpha': np.array(0.25, dtype=np.float32),
               'empty': np.zeros((0, 4), dtype=np.float32)}
    server = ParameterServer(ParameterServerConfig(num_shards=4, replicas=2))
    server.initialize(tensors, version=3)
    version, out = server.read()
    assert version == 3
    _same(out, tensors)
    assignment = server.assignment()
    big = [k for k in assignment if k.startswith('actor/trunk.0.weight#')]
    assert len(big) == 5
    assert len({assignment[k][0] for k in big}) >= 2  # several primaries
    assert len({s for k in big for s in assignment[k]}) >= 3
    assert all(len(set(ids)) == 2 for ids in assignment.values())
    _check_shards_match_assignment(server)
    # Reads are copies: changing them does not touch the server.
    out['actor/trunk.0.weight'][:] = 7.0
    _same(server.read()[1], tensors)
    # A subset of the tensors (an actor reads only the policy).
    version, actor = server.read(['actor/trunk.0.weight'])
    assert list(actor) == ['actor/trunk.0.weight']
    with pytest.raises(KeyError, match='unknown tensor'):
        server.read(['nope'])


def test_read_before_initialize_is_a_clear_error():
    server = ParameterServer(ParameterServerConfig())
    assert server.version is None
    with pytest.raises(RuntimeError, match='not initialized'):
        server.read()
    with pytest.raises(RuntimeError, match='not initialized'):
        server.commit({}, 0)


# ====================================================================== commits and versions
def test_commit_applies_to_every_replica_and_bumps_the_version_by_one():
    server = _server()
    delta = _delta(7)
    assert server.commit(delta, base_version=0) == 1
    assert server.version == 1
    version, out = server.read()
    assert version == 1
    _same(out, {n: v + delta[n] for n, v in _model().items()})
    for key, ids in server.assignment().items():
        copies = [server.shard(s).read([key])[key] for s in ids]
        assert all(v == 1 for _, v in copies)
        assert all(c[0].tobytes() == copies[0][0].tobytes() for c in copies)
    # A commit may leave tensors out: they are unchanged but advance in version.
    assert server.commit({'log_alpha': np.array(0.5, np.float32)}, base_version=1) == 2
    version, after = server.read()
    assert version == 2 and after['log_alpha'] == out['log_alpha'] + np.float32(0.5)
    _same({n: after[n] for n in after if n != 'log_alpha'},
          {n: out[n] for n in out if n != 'log_alpha'})
    _check_shards_match_assignment(server)
    stats = server.stats()
    assert stats['commits'] == 2 and stats['version'] == 2
    assert stats['delta_bytes'] == sum(d.nbytes for d in delta.values()) + 4


def test_stale_or_future_base_version_is_rejected_and_changes_nothing():
    server = _server()
    server.commit(_delta(1), base_version=0)
    before = server.read()[1]
    for base in (0, 2):
        with pytest.raises(StaleCommitError, match='single writer'):
            server.commit(_delta(2), base_version=base)
    assert server.version == 1
    _same(server.read()[1], before)


def test_bad_deltas_are_rejected_before_anything_changes():
    server = _server()
    before = server.read()[1]
    bad = _delta(3)
    bad['critic/q1.0.weight'][5, 5] = np.nan
    with pytest.raises(ValueError, match='not finite'):
        server.commit(bad, 0)
    with pytest.raises(ValueError, match='floats'):
        server.commit({'actor/trunk.0.bias': np.zeros(3, np.float32)}, 0)
    with pytest.raises(KeyError, match='unknown tensor'):
        server.commit({'nope': np.zeros(3, np.float32)}, 0)
    assert server.version == 0
    _same(server.read()[1], before)


def test_versions_are_monotonic():
    server = _server()
    versions = [server.commit(_delta(i), server.version) for i in range(5)]
    assert versions == [1, 2, 3, 4, 5]
    stats = server.stats()
    assert all(s['min_version'] == s['max_version'] == 5 for s in stats['shards'].values())
    # A shard refuses writes that do not move forward.
    shard = server.shard('shard_0')
    key = shard.keys[0]
    part = next(p for p in server.layout if p.key == key)
    for version in (5, 4):
        with pytest.raises(VersionError, match='not newer'):
            shard.apply(key, None, version)
    with pytest.raises(VersionError, match='go back'):
        shard.load(part, np.zeros(part.size, np.float32), 4)
    # Re-initializing must move forward too.
    with pytest.raises(VersionError, match='already at version 5'):
        server.initialize(_model(), version=5)
    server.initialize(_model(1), version=9)
    assert server.version == 9
    _same(server.read()[1], _model(1))


# ====================================================================== failures
def test_failover_read_after_any_single_shard_failure_is_identical():
    server = _server()
    server.commit(_delta(4), 0)
    reference = server.read()
    for shard_id in server.shard_ids:
        server.fail_shard(shard_id)
        version, out = server.read()
        assert version == reference[0]
        _same(out, reference[1])
        server.recover_shard(shard_id)
    assert server.stats()['shards']['shard_0']['alive']


def test_recovered_shard_resyncs_commits_made_while_it_was_down():
    server = _server()
    server.fail_shard('shard_1')
    assert not server.stats()['shards']['shard_1']['alive']
    for i in range(3):
        server.commit(_delta(10 + i), server.version)
    assert server.stats()['shards']['shard_1']['max_version'] == 0  # it missed the commits
    mine = [k for k, ids in server.assignment().items() if 'shard_1' in ids]
    assert server.recover_shard('shard_1') == len(mine) > 0
    assert server.recover_shard('shard_1') == 0  # already up
    _check_shards_match_assignment(server)
    version, expected = server.read()
    assert version == 3
    shard = server.shard('shard_1')
    answer = shard.read()
    flat = {n: v.reshape(-1) for n, v in expected.items()}
    for part in server.layout:
        if part.key in answer:
            values, part_version = answer[part.key]
            assert part_version == version
            assert values.tobytes() == flat[part.tensor][part.start:part.stop].tobytes()


def test_every_replica_dead_is_a_clear_error_and_recovery_restores_service():
    server = _server()
    server.commit(_delta(5), 0)
    expected = server.read()[1]
    key, (first, second) = next(iter(server.assignment().items()))
    server.fail_shard(first)
    server.fail_shard(second)
    with pytest.raises(PartitionUnavailableError, match='every replica'):
        server.read()
    with pytest.raises(PartitionUnavailableError, match='every replica'):
        server.commit(_delta(6), 1)
    assert server.version == 1
    # The first shard to come back keeps its own copy (no commit could happen meanwhile).
    server.recover_shard(first)
    version, out = server.read()
    assert version == 1
    _same(out, expected)
    server.recover_shard(second)
    _check_shards_match_assignment(server)


def test_recovery_refuses_an_out_of_date_copy_without_a_live_peer():
    server = _server(num_shards=2)  # replicas=2: both shards hold everything
    server.fail_shard('shard_0')
    server.commit(_delta(8), 0)
    server.fail_shard('shard_1')
    with pytest.raises(PartitionUnavailableError, match='out of date'):
        server.recover_shard('shard_0')
    assert not server.shard('shard_0').alive
    server.recover_shard('shard_1')  # holds version 1
    assert server.recover_shard('shard_0') == len(server.layout)
    _same(server.read()[1], {n: v + _delta(8)[n] for n, v in _model().items()})


def test_dead_shard_refuses_calls():
    shard = ParameterShard('s')
    part = Partition('t#0', 't', 0, 3)
    shard.load(part, np.arange(3, dtype=np.float32), 0)
    shard.alive = False
    with pytest.raises(RuntimeError, match='down'):
        shard.read()
    with pytest.raises(RuntimeError, match='down'):
        shard.apply('t#0', None, 1)
    with pytest.raises(KeyError):
        ParameterShard('x').read(['t#0'])


def test_unknown_shard_ids_are_clear_errors():
    server = _server()
    with pytest.raises(KeyError, match='unknown shard'):
        server.fail_shard('shard_9')
    with pytest.raises(KeyError, match='unknown shard'):
        server.recover_shard('shard_9')
    with pytest.raises(ValueError, match='already exists'):
        server.add_shard('shard_0')


# ====================================================================== rebalancing
def _ring_answer(server, change, shard_id):
    ring = HashRing(server.cfg.virtual_nodes)
    for node in server.shard_ids:
        ring.add_node(node)
    getattr(ring, change)(shard_id)
    return {p.key: ring.nodes_for(p.key, server.cfg.replicas) for p in server.layout}


def test_add_shard_moves_only_the_partitions_the_ring_says():
    server = _server()
    server.commit(_delta(9), 0)
    before = server.assignment()
    expected = _ring_answer(server, 'add_node', 'shard_4')
    changed = [k for k in before if before[k] != expected[k]]
    report = server.add_shard('shard_4')
    assert report.moved == len(changed) > 0
    assert report.moved < len(before) / 2  # about replicas / 5 of the partitions
    assert server.assignment() == expected
    # Every changed set gained the new shard and lost one old member: one copy, one drop.
    assert all('shard_4' in expected[k] for k in changed)
    assert report.copied == report.dropped == len(changed)
    _check_shards_match_assignment(server)
    version, out = server.read()
    assert version == 1
    _same(out, {n: v + _delta(9)[n] for n, v in _model().items()})
    assert server.commit(_delta(10), 1) == 2
    _check_shards_match_assignment(server)


def test_remove_shard_moves_only_the_partitions_the_ring_says():
    server = _server(num_shards=5)
    server.commit(_delta(11), 0)
    expected_values = server.read()[1]
    before = server.assignment()
    expected = _ring_answer(server, 'remove_node', 'shard_2')
    changed = [k for k in before if before[k] != expected[k]]
    assert changed == [k for k in before if 'shard_2' in before[k]]
    report = server.remove_shard('shard_2')
    assert report.moved == len(changed) > 0
    assert report.copied == len(changed) and report.dropped == 0  # the leaver just goes
    assert server.assignment() == expected
    assert 'shard_2' not in server.shard_ids
    _check_shards_match_assignment(server)
    _same(server.read()[1], expected_values)


def test_remove_shard_while_it_is_down_uses_the_other_replica():
    server = _server(num_shards=4)
    server.commit(_delta(12), 0)
    expected_values = server.read()[1]
    server.fail_shard('shard_3')
    report = server.remove_shard('shard_3')
    assert report.moved > 0
    _check_shards_match_assignment(server)
    _same(server.read()[1], expected_values)
    with pytest.raises(ValueError, match='last shard'):
        solo = _server(num_shards=1, replicas=1)
        solo.remove_shard('shard_0')


def test_remove_shard_refuses_to_drop_the_last_live_copy():
    server = _server(num_shards=3)
    server.commit(_delta(14), 0)
    expected_values = server.read()[1]
    before = server.assignment()
    server.fail_shard('shard_1')
    server.fail_shard('shard_2')
    # shard_0 holds the only live copies; its partitions would go to dead shards only.
    with pytest.raises(PartitionUnavailableError, match='no live replica'):
        server.remove_shard('shard_0')
    assert server.shard_ids == ('shard_0', 'shard_1', 'shard_2')
    assert server.assignment() == before
    for shard_id in ('shard_1', 'shard_2'):
        server.recover_shard(shard_id)
    server.remove_shard('shard_0')
    _check_shards_match_assignment(server)
    _same(server.read()[1], expected_values)


def test_stats_count_bytes_and_partitions_per_shard():
    server = _server()
    stats = server.stats()
    total_bytes = sum(v.nbytes for v in _model().values())
    assert stats['partitions'] == len(server.layout)
    assert sum(s['partitions'] for s in stats['shards'].values()) == 2 * len(server.layout)
    assert sum(s['bytes'] for s in stats['shards'].values()) == 2 * total_bytes


def test_shard_state_dict_round_trip():
    server = _server()
    server.commit(_delta(13), 0)
    shard = server.shard('shard_0')
    copy = ParameterShard('shard_0')
    copy.load_state_dict(shard.state_dict())
    assert copy.keys == shard.keys
    a, b = shard.read(), copy.read()
    assert all(a[k][0].tobytes() == b[k][0].tobytes() and a[k][1] == b[k][1] for k in a)


def test_readers_never_see_a_half_applied_commit():
    tensors = {'w': np.zeros(4096, np.float32), 'b': np.zeros(7, np.float32)}
    server = _server(chunk_size=256, tensors=tensors)
    ones = {n: np.ones_like(v) for n, v in tensors.items()}
    done = threading.Event()
    torn = []

    def reader():
        while not done.is_set():
            version, out = server.read()
            if any(np.any(v != version) for v in out.values()):
                torn.append(version)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for _ in range(200):
            server.commit(ones, server.version)
    finally:
        done.set()
        thread.join()
    assert not torn
    assert server.version == 200


# ====================================================================== delayed update
def _learner_run(steps, seed=0, lr=3e-3):
    """Yield Adam-like parameter trajectories; some weights cross zero on the way."""
    rng = np.random.default_rng(seed)
    params = {n: v.copy() for n, v in _model().items()}
    for _ in range(steps):
        for name, value in params.items():
            value += (lr * np.sign(rng.standard_normal(value.shape))).astype(np.float32)
        yield params


def test_accumulator_commits_every_eighth_step_and_the_deltas_rebuild_the_parameters():
    server = _server()
    acc = CommitAccumulator(8, server.read()[1])
    commit_steps = []
    for step, params in enumerate(_learner_run(40), start=1):
        delta = acc.step(params)
        if delta is None:
            continue
        commit_steps.append(step)
        server.commit(delta, server.version)
        held = server.read()[1]
        # The reference mirrors the server bit for bit (same float32 operation) ...
        _same(held, acc.reference)
        # ... and the server is within one float32 rounding of the learner.
        for name in held:
            bound = np.spacing(np.maximum(np.abs(delta[name]), np.abs(held[name])))
            assert np.all(np.abs(held[name] - params[name]) <= bound), name
    assert commit_steps == [8, 16, 24, 32, 40]
    assert acc.commits == 5 and acc.steps == 40 and acc.pending_steps == 0
    assert acc.bytes_committed == 5 * sum(v.nbytes for v in _model().values())
    # Flushing the rounding residue (if any) makes the server equal the learner exactly.
    for _ in range(3):
        delta = acc.flush()
        if delta is None:
            break
        server.commit(delta, server.version)
    assert acc.flush() is None
    _same(server.read()[1], params)


def test_commit_every_one_commits_every_step():
    server = _server()
    acc = CommitAccumulator(1, server.read()[1])
    for params in _learner_run(6):
        delta = acc.step(params)
        assert delta is not None
        server.commit(delta, server.version)
    assert server.version == 6 and acc.commits == 6


def test_flush_commits_mid_window_and_restarts_the_count():
    start = _model()
    acc = CommitAccumulator(8, start)
    assert acc.flush() is None  # nothing seen yet
    run = _learner_run(20)
    for _ in range(3):
        params = next(run)
        assert acc.step(params) is None
    assert acc.pending_steps == 3
    delta = acc.flush()
    assert delta is not None and acc.pending_steps == 0
    rebuilt = {n: start[n] + delta[n] for n in start}
    _same(rebuilt, acc.reference)
    # The count restarts: the next commit comes 8 steps after the flush.
    results = [acc.step(next(run)) is not None for _ in range(8)]
    assert results == [False] * 7 + [True]
    # flush() uses a private copy of the last step's tensors, not the caller's arrays.
    last = {n: v.copy() for n, v in params.items()}
    acc2 = CommitAccumulator(8, start)
    acc2.step(last)
    for value in last.values():
        value += 1.0
    delta = acc2.flush()
    assert np.all(np.abs(start['log_alpha'] + delta['log_alpha'] - last['log_alpha']) > 0.5)
    # Explicit tensors work too; shape and name mismatches are errors.
    assert acc2.flush(last) is not None
    with pytest.raises(KeyError):
        acc2.step({'log_alpha': last['log_alpha']})
    with pytest.raises(ValueError, match='shape'):
        acc2.step({**last, 'log_alpha': np.zeros(2, np.float32)})
    with pytest.raises(ValueError, match='commit_every'):
        CommitAccumulator(0, start)


def test_acknowledge_feeds_back_a_lossy_commit_and_a_rejected_one():
    server = _server()
    acc = CommitAccumulator(4, server.read()[1])
    run = _learner_run(64, seed=3)
    for params in run:
        delta = acc.step(params)
        if delta is None:
            continue
        # A lossy transport: only a coarse version of the delta reaches the server.
        coarse = {n: (np.round(d / 1e-3) * 1e-3).astype(np.float32) for n, d in delta.items()}
        server.commit(coarse, server.version)
        acc.acknowledge(server.read()[1])
    # The quantization error was fed back: the server is within one grid step, not drifting.
    held = server.read()[1]
    assert max(float(np.max(np.abs(held[n] - params[n]))) for n in held) <= 0.5e-3 + 1e-6
    # A commit lost to a stale base: re-read, acknowledge, and the next delta catches up.
    base = server.version
    server.commit(_delta(20), base)  # someone else wrote (only a test can do that)
    with pytest.raises(StaleCommitError):
        server.commit(acc.flush(params) or {}, base)
    acc.acknowledge(server.read()[1])
    for _ in range(3):
        delta = acc.flush(params)
        if delta is None:
            break
        server.commit(delta, server.version)
    _same(server.read()[1], params)
    with pytest.raises(KeyError):
        acc.acknowledge({'w': np.zeros(2)})


def test_accumulator_accepts_torch_tensors():
    torch = pytest.importorskip('torch')
    start = _model()
    acc = CommitAccumulator(2, {n: torch.from_numpy(v.copy()) for n, v in start.items()})
    params = {n: torch.from_numpy(np.asarray(v + np.float32(0.25))).requires_grad_() for n, v in
              start.items()}
    assert acc.step(params) is None
    delta = acc.step(params)
    assert set(delta) == set(start)
    reference = acc.reference
    for name, value in delta.items():
        assert isinstance(value, np.ndarray) and value.dtype == np.float32
        assert value.shape == start[name].shape
        np.testing.assert_array_equal(start[name] + value, reference[name])
        np.testing.assert_allclose(value, 0.25, atol=1e-6)


@pytest.mark.parametrize('seed', [0, 1, 2])
def test_random_failures_and_membership_changes_keep_reads_exact(seed):
    """Random commits, crashes, recoveries, joins and leaves against a plain numpy model."""
    rng = np.random.default_rng(seed)
    server = _server(num_shards=3, chunk_size=128)
    model = _model()
    next_id = 3
    for _ in range(150):
        shards = server.shard_ids
        alive = {s for s in shards if server.shard(s).alive}
        available = all(any(s in alive for s in ids) for ids in server.assignment().values())
        op = rng.choice(['commit', 'read', 'fail', 'recover', 'add', 'remove'],
                        p=[0.35, 0.2, 0.15, 0.15, 0.075, 0.075])
        if op == 'commit':
            delta = _delta(int(rng.integers(1 << 30)), scale=1e-3)
            if available:
                server.commit(delta, server.version)
                model = {n: v + delta[n] for n, v in model.items()}
            else:
                with pytest.raises(PartitionUnavailableError):
                    server.commit(delta, server.version)
        elif op == 'read':
            if available:
                _same(server.read()[1], model)
            else:
                with pytest.raises(PartitionUnavailableError):
                    server.read()
        elif op == 'fail' and alive:
            server.fail_shard(str(rng.choice(sorted(alive))))
        elif op == 'recover' and len(alive) < len(shards):
            try:
                server.recover_shard(str(rng.choice(sorted(set(shards) - alive))))
            except PartitionUnavailableError:
                pass  # an out-of-date copy with no live peer: it stays down
        elif op == 'add' and len(shards) < 6:
            before = server.assignment()
            try:
                server.add_shard(f'shard_{next_id}')
                next_id += 1
            except PartitionUnavailableError:
                assert not available  # some partition had no live copy to hand over
                assert server.shard_ids == shards and server.assignment() == before
        elif op == 'remove' and len(shards) > 2:
            before = server.assignment()
            try:
                server.remove_shard(str(rng.choice(shards)))
            except PartitionUnavailableError:
                # No live copy to hand over, or the leaver held the last live copy of a
                # partition whose new replicas are all down: refused, nothing changed.
                assert server.shard_ids == shards and server.assignment() == before
        # Live shards always hold exactly their assigned partitions at the current version.
        assignment = server.assignment()
        for shard_id in server.shard_ids:
            shard = server.shard(shard_id)
            if shard.alive:
                assert list(shard.keys) == sorted(k for k, ids in assignment.items()
                                                  if shard_id in ids)
                assert all(shard.version_of(k) == server.version for k in shard.keys)
    # Bring everything back: a shard whose copy is stale waits for a peer to return first.
    for _ in server.shard_ids:
        for shard_id in server.shard_ids:
            try:
                server.recover_shard(shard_id)
            except PartitionUnavailableError:
                pass
    assert all(server.shard(s).alive for s in server.shard_ids)
    _same(server.read()[1], model)
    _check_shards_match_assignment(server)
