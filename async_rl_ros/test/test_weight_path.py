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

"""The local weight path with real shard processes: deltas, late joiners, dead shards."""

import os
import pickle
import time
import types

from async_rl_ros.core.config import ParameterServerConfig
from async_rl_ros.core.learning.networks import Actor
from async_rl_ros.core.records import PolicyState
from async_rl_ros.core.weights.codec import CodecConfig
from async_rl_ros.core.weights.receiver import InProcessWeightPath
from async_rl_ros.local.weight_board import WeightBoard
from async_rl_ros.local.weight_path import LocalWeightPath, LocalWeightReceiver
import numpy as np
import pytest
import torch

OBS_DIM, ACT_DIM, HIDDEN = 21, 6, (64, 64)
DEADLINE_S = 60.0  # only guards against a hang; no test asserts a duration


def _learner(seed=0):
    """Yield policy states of an actor trained with Adam towards a teacher (a training run)."""
    torch.manual_seed(seed)
    actor, teacher = Actor(OBS_DIM, ACT_DIM, HIDDEN), Actor(OBS_DIM, ACT_DIM, HIDDEN)
    optimizer = torch.optim.Adam(actor.parameters(), lr=3e-4)
    obs = torch.randn(256, OBS_DIM)
    mean = np.linspace(-1, 1, OBS_DIM).astype(np.float32)
    std = np.linspace(0.5, 2, OBS_DIM).astype(np.float32)
    while True:
        yield actor, PolicyState(actor={k: v.detach().clone() for k, v in
                                        actor.state_dict().items()},
                                 obs_mean=mean, obs_std=std, obs_clip=5.0, version=0)
        for _ in range(8):  # commit_every updates
            loss = sum(((a - b.detach()) ** 2).mean() for a, b in zip(actor(obs), teacher(obs)))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


def _wait(predicate, what):
    deadline = time.monotonic() + DEADLINE_S
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f'timed out waiting for {what}')
        time.sleep(0.01)


def _receive(receiver, version):
    """Poll until the receiver assembles ``version``; return the last state assembled."""
    got = []

    def arrived():
        state = receiver.poll()
        if state is not None:
            got.append(state)
        return receiver.version >= version

    _wait(arrived, f'version {version}')
    return got[-1] if got else None


def _deviation(actor, state, obs):
    copy = Actor(OBS_DIM, ACT_DIM, HIDDEN)
    copy.load_state_dict(state.actor)
    with torch.no_grad():
        return (copy.act(obs, True) - actor.act(obs, True)).abs().max().item()


def _gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f'/proc/{pid}/stat') as f:  # a zombie has exited too
        return f.read().split(')')[-1].split()[0] == 'Z'


@pytest.fixture
def path_and_run():
    run = _learner()
    _, initial = next(run)
    path = LocalWeightPath(ParameterServerConfig(), CodecConfig(full_every=20), initial)
    yield path, run
    pids = path.pids()
    path.close()
    assert all(_gone(pid) for pid in pids)  # no process left behind


def test_weights_reach_a_receiver_as_deltas_within_the_action_bound(path_and_run):
    path, run = path_and_run
    receiver = pickle.loads(pickle.dumps(LocalWeightReceiver(path.board_names, OBS_DIM)))
    obs = torch.randn(2000, OBS_DIM)
    worst = 0.0
    for _ in range(30):
        actor, state = next(run)
        version = path.publish(state)
        received = _receive(receiver, version)
        assert received.version == version
        np.testing.assert_array_equal(received.obs_std, state.obs_std)
        worst = max(worst, _deviation(actor, received, obs))
    assert worst <= 1e-2
    assert receiver.delta_packets > 3 * receiver.full_packets  # mostly deltas
    per_delta = receiver.bytes_delta / receiver.delta_packets
    per_full = (receiver.bytes_received - receiver.bytes_delta) / receiver.full_packets
    assert per_delta < 0.75 * per_full  # (bench/compression.py measures a SAC run)
    assert receiver.rejected == 0
    receiver.close()


def test_a_late_receiver_that_missed_the_keyframe_recovers_from_it(path_and_run):
    path, run = path_and_run
    early = LocalWeightReceiver(path.board_names, OBS_DIM)
    _receive(early, 0)  # the shards serve their first keyframe
    for _ in range(5):
        _, state = next(run)
        version = path.publish(state)
        _wait(lambda: all(b.version == version for b, _ in early.boards), 'the shards')
    _receive(early, version)
    late = LocalWeightReceiver(path.board_names, OBS_DIM)  # joins after the keyframe
    state = _receive(late, version)
    assert state.version == version and late.resyncs == 1 and late.full_packets == 1
    # A receiver that skips packets still applies the next delta on the keyframe.
    for _ in range(6):
        _, state = next(run)
        version = path.publish(state)
        _wait(lambda: all(b.version == version for b, _ in late.boards), 'the shards')
    assert _receive(late, version).version == version
    assert late.resyncs == 1 and late.rejected == 0
    early.close()
    late.close()


def test_a_corrupt_board_packet_is_rejected_and_the_policy_kept(path_and_run):
    path, run = path_and_run
    receiver = LocalWeightReceiver(path.board_names, OBS_DIM)
    _, state = next(run)
    version = path.publish(state)
    _receive(receiver, version)
    _wait(lambda: all(b.version == version for b, _ in receiver.boards), 'the shards')
    data = bytearray(WeightBoard(path.board_names[0][0]).read()[1])
    data[10] ^= 0x40  # inside the shard layout
    forged = WeightBoard(path.board_names[0][0])
    forged.publish(bytes(data), version + 100)
    forged.close()
    assert receiver.poll() is None and receiver.version == version
    assert receiver.rejected == 1


def test_a_killed_shard_is_served_by_its_replica_then_respawned_and_resynced(path_and_run):
    path, run = path_and_run
    for _ in range(3):
        _, state = next(run)
        version = path.publish(state)
    boards = [WeightBoard(latest) for latest, _ in path.board_names]
    _wait(lambda: all(b.version == version for b in boards), 'the shards')
    receiver = LocalWeightReceiver(path.board_names, OBS_DIM)
    _receive(receiver, version)
    assert set(receiver.assembler.decoders) == {0}  # it reads shard 0 while both serve
    joined = receiver.resyncs  # 1 if shard 0's latest packet was a delta, else 0
    dead = path.pids()[0]
    path._procs[0].kill()
    _wait(lambda: not path.alive()[0], 'the shard to die')
    obs = torch.randn(500, OBS_DIM)
    for _ in range(3):  # shard 0 is down: its replica on shard 1 serves every partition
        actor, state = next(run)
        version = path.committer.version + 1
        packets = path.committer.commit(state)
        path._send(1, packets[1])  # (publish() would respawn shard 0 first)
        assert _deviation(actor, _receive(receiver, version), obs) <= 1e-2
    assert receiver.resyncs == joined + 1  # shard 1's keyframe, once
    assert path.maintain() == [0] and path.respawns == 1 and path.pids()[0] != dead
    _wait(lambda: receiver.boards[0][0].version == path.committer.version, 'the re-sync')
    _, state = next(run)
    version = path.publish(state)
    _wait(lambda: all(b.version == version for b, _ in receiver.boards), 'both shards')
    assert _receive(receiver, version).version == version
    assert path.alive() == [True, True] and receiver.rejected == 0
    for board in boards:
        board.close()


def _learner_process(pids):
    """Child process: start a weight path, report the shard pids, then wait to be killed."""
    _, initial = next(_learner())
    path = LocalWeightPath(ParameterServerConfig(), CodecConfig(), initial)
    pids.put((path.pids(), path.board_names))
    time.sleep(600)


def test_shard_processes_exit_when_their_learner_is_killed():
    import multiprocessing as mp
    ctx = mp.get_context('spawn')
    pids = ctx.Queue()
    learner = ctx.Process(target=_learner_process, args=(pids,))
    learner.start()
    shards, names = pids.get(timeout=DEADLINE_S)
    assert all(not _gone(pid) for pid in shards)
    learner.kill()  # no close(), no atexit: only the shards' watchdog can end them
    learner.join()
    _wait(lambda: all(_gone(pid) for pid in shards), 'the orphaned shards to exit')
    for pair in names:  # what the killed learner could not remove
        for name in pair:
            board = WeightBoard(name)
            board.owner = True
            board.close()


def test_the_in_process_path_sends_the_same_deltas_and_a_late_receiver_recovers():
    """Single-process training: the same committer, replicas and receiver, by plain calls."""
    run = _learner()
    _, initial = next(run)
    path = InProcessWeightPath(ParameterServerConfig(), CodecConfig(full_every=20), initial)
    prompt = path.receiver(OBS_DIM)
    assert prompt.poll().version == initial.version
    obs = torch.randn(2000, OBS_DIM)
    for _ in range(12):
        actor, state = next(run)
        version = path.publish(state)
        received = prompt.poll()
        assert received.version == version
        assert _deviation(actor, received, obs) <= 1e-2
    assert prompt.delta_packets == 12 and prompt.full_packets == 1  # replicas: one shard read
    late = path.receiver(OBS_DIM)  # joins after the keyframe: fetches it once per shard used
    assert late.poll().version == version
    assert late.resyncs == 1 and late.full_packets == 1 and late.delta_packets == 1
    for _ in range(3):  # it misses packets: the next delta on the keyframe is enough
        _, state = next(run)
        version = path.publish(state)
    assert late.poll().version == version and late.resyncs == 1
    assert prompt.rejected == late.rejected == 0


def test_a_receiver_stays_on_the_shard_whose_keyframe_it_holds():
    """With replicas, a delta from the shard whose keyframe it holds beats a keyframe fetch."""
    from async_rl_ros.core.weights.receiver import MemoryBoard, ShardOutlet, WeightReceiver
    from async_rl_ros.core.weights.sharded_weights import (ShardedCommitter, ShardPacket,
                                                           ShardReplica)

    run = _learner()
    _, initial = next(run)
    ps = ParameterServerConfig()
    committer = ShardedCommitter(ps, initial)
    replicas = [ShardReplica(i, ps.num_shards, CodecConfig(full_every=3)) for i in range(2)]

    class MessageBoard(MemoryBoard):  # holds what a transport carries, as a ROS worker's

        def publish(self, data, version):
            super().publish(types.SimpleNamespace(raw=data), version)

    boards = [(MessageBoard(), MessageBoard()) for _ in range(2)]
    outlets = [ShardOutlet(*pair) for pair in boards]
    receiver = WeightReceiver([(a.view(), b.view()) for a, b in boards], OBS_DIM,
                              parse=lambda message: ShardPacket.from_bytes(message.raw))

    def commit(shards):
        _, state = next(run)
        packets = committer.commit(state)
        for i in shards:  # the other shard lags behind (its process is slow)
            replicas[i].apply(packets[i])
            outlets[i].post(replicas[i])
        return packets

    for i in range(2):
        replicas[i].apply(committer.full(i))
        outlets[i].post(replicas[i])
    assert receiver.poll().version == 0
    for version in (1, 2):                # deltas on keyframe 0, read from shard 0
        commit([0, 1])
        assert receiver.poll().version == version
    lagging = commit([1])                 # shard 1 serves keyframe 3 first ...
    assert receiver.poll().version == 3 and receiver.full_packets == 2
    replicas[0].apply(lagging[0])         # ... then shard 0 catches up
    outlets[0].post(replicas[0])
    for _ in range(2):
        commit([0, 1])                    # deltas on keyframe 3, from both shards
        assert receiver.poll() is not None
    assert receiver.resyncs == 0 and receiver.full_packets == 2 and receiver.rejected == 0
    assert receiver.bytes_received > receiver.bytes_delta > 0  # sized as serialized packets


def test_a_delta_that_arrives_before_its_keyframe_waits_for_it_and_is_not_rejected():
    """Two topics, a lossy link: a delta on a new keyframe can come before that keyframe."""
    from async_rl_ros.core.weights.receiver import MemoryBoard, WeightReceiver
    from async_rl_ros.core.weights.sharded_weights import ShardedCommitter, ShardReplica

    run = _learner()
    _, initial = next(run)
    committer = ShardedCommitter(ParameterServerConfig(num_shards=1, replicas=1), initial)
    replica = ShardReplica(0, 1, CodecConfig(full_every=2))  # keyframes 0, 2, 4, ...
    latest, keyframe = MemoryBoard(), MemoryBoard()
    receiver = WeightReceiver([(latest.view(), keyframe.view())], OBS_DIM)

    def commit(first=False):
        """Apply the next commit; return what the shard serves and its keyframe."""
        state = next(run)[1]
        replica.apply(committer.full(0) if first else committer.commit(state)[0])
        return replica.serve(), replica.keyframe()

    def post(board, packet):
        board.publish(packet.to_bytes(), packet.packet.version)

    served, key = commit(first=True)
    post(keyframe, key)
    post(latest, served)
    assert receiver.poll().version == 0
    served, _ = commit()                     # 1: a delta on keyframe 0
    post(latest, served)
    assert receiver.poll().version == 1
    _, key = commit()                        # 2: a keyframe, lost for now on both topics
    served, _ = commit()                     # 3: a delta on keyframe 2, delivered first
    assert served.packet.base_version == key.packet.version == 2
    post(latest, served)
    assert receiver.poll() is None and receiver.poll() is None  # it waits for keyframe 2
    assert receiver.rejected == 0
    post(keyframe, key)                      # keyframe 2 comes late
    assert receiver.poll().version == 3
    assert receiver.rejected == 0 and receiver.resyncs == 1
    assert receiver.poll() is None           # nothing left waiting
    # A receiver that starts now (a respawned worker) holds no run yet and sees delta 3
    # before any keyframe: it waits for keyframe 2 too, rejecting nothing.
    late_key = MemoryBoard()
    fresh = WeightReceiver([(latest.view(), late_key.view())], OBS_DIM)
    assert fresh.poll() is None and fresh.rejected == 0
    post(late_key, key)
    assert fresh.poll().version == 3
    assert fresh.rejected == 0 and fresh.resyncs == 1
