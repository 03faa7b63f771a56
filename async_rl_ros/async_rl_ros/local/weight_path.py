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
The weight path without ROS: one process per parameter-server shard, shared-memory boards.

The same committer, shard replicas and assembler as under ROS
(:mod:`async_rl_ros.core.weights.sharded_weights`), carried by multiprocessing instead of
topics::

    learner process: LocalWeightPath.publish(state) -> ShardedCommitter.commit
        --(one queue per shard: float32 commits)--> shard process i: ShardReplica.apply
        --> board i: the latest packet (a keyframe or a delta on it) and its keyframe
    worker process: LocalWeightReceiver.poll() reads the newest boards, fetches a keyframe
        it lacks, assembles the policy with a ShardAssembler (a WeightReceiver of
        :mod:`async_rl_ros.core.weights.receiver`, as in single-process training)

A board is a latest-value channel (:class:`~async_rl_ros.local.weight_board.WeightBoard`): a
worker may miss packets, and since every delta is based on the last keyframe, it applies the
next one all the same. A worker that lacks the keyframe (it joined late, or its shard was
respawned) reads it once from the shard's keyframe board. The learner creates the boards, so
they outlive a shard process that dies: workers go on assembling from the replicas, and
:meth:`LocalWeightPath.maintain` respawns the shard and re-syncs it with a full commit. A
shard process watches its parent and exits when the parent is gone (no orphans).
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import queue
from typing import Any

from async_rl_ros.core.config import CodecConfig, ParameterServerConfig
from async_rl_ros.core.records import PolicyState
from async_rl_ros.core.weights.codec import CodecError
from async_rl_ros.core.weights.expect import Expectation
from async_rl_ros.core.weights.receiver import ShardOutlet, WeightReceiver
from async_rl_ros.core.weights.sharded_weights import ShardedCommitter, ShardPacket, ShardReplica
from async_rl_ros.local.lifecycle import child_entry
from async_rl_ros.local.weight_board import WeightBoard

__all__ = ['LocalWeightPath', 'LocalWeightReceiver']

# Slots of a shard's status array (written by the shard process, read by the learner).
_VERSION, _APPLIED, _REJECTED, _NEEDS_FULL = range(4)


@child_entry('weights shard')  # dies with the learner; stopped by it (a None commit)
def _shard_main(shard_id: int, num_shards: int, codec_cfg: CodecConfig, commits: Any,
                boards: tuple[str, str], status: Any) -> None:
    """Run one shard: apply the learner's commits, put the packets on the shard's boards."""
    replica = ShardReplica(shard_id, num_shards, codec_cfg)
    outlet = ShardOutlet(WeightBoard(boards[0]), WeightBoard(boards[1]))
    try:
        while True:  # a learner that dies ends the wait (child_entry: its death signal)
            backlog = [commits.get()]
            while True:  # apply every queued commit, serve only the newest state
                try:
                    backlog.append(commits.get_nowait())
                except queue.Empty:
                    break
            for data in backlog:
                if data is None:
                    return
                try:
                    replica.apply(ShardPacket.from_bytes(data), serve=False)
                except CodecError as exc:
                    status[_REJECTED] += 1
                    if exc.reason in ('base_version', 'version', 'run_id') or replica.version < 0:
                        status[_NEEDS_FULL] = 1
                else:
                    status[_APPLIED] += 1
            if outlet.post(replica):
                status[_VERSION] = replica.version
    finally:
        outlet.latest.close()
        outlet.keyframe.close()


class LocalWeightPath:
    """
    Learner side: the committer and one process per shard, each with its pair of boards.

    Shard processes are daemonic children, so the object must live in a non-daemonic process
    (the learner's main process).

    :param ps_cfg: shards, replicas, ring, chunk size.
    :param codec_cfg: codec of the packets the shards serve (``delta``, ``full_every``, ...).
    :param initial: the policy state the shards start from.
    :param capacity: bytes per board (default: twice the float32 actor, plus 64 KiB).
    """

    def __init__(self, ps_cfg: ParameterServerConfig, codec_cfg: CodecConfig,
                 initial: PolicyState, capacity: int | None = None):
        self.ps_cfg, self.codec_cfg = ps_cfg, codec_cfg
        self.committer = ShardedCommitter(ps_cfg, initial)
        if capacity is None:
            capacity = 2 * sum(v.nbytes for v in initial.tensors().values()) + (1 << 16)
        self._ctx = mp.get_context('spawn')
        n = ps_cfg.num_shards
        self.boards = [(WeightBoard(capacity=capacity), WeightBoard(capacity=capacity))
                       for _ in range(n)]
        self._status = [self._ctx.Array('q', 4, lock=False) for _ in range(n)]
        self._queues: list[Any] = [None] * n
        self._procs: list[Any] = [None] * n
        self.respawns = 0
        self.resyncs = 0
        self.bytes_committed = 0
        self._closed = False
        for i in range(n):
            self._start(i)

    @property
    def board_names(self) -> list[tuple[str, str]]:
        """Return ``(latest, keyframe)`` board names per shard: what a receiver attaches to."""
        return [(latest.name, key.name) for latest, key in self.boards]

    @property
    def version(self) -> int:
        """Return the version of the last commit."""
        return self.committer.version

    def _start(self, shard_id: int) -> None:
        self._queues[shard_id] = self._ctx.Queue()
        self._status[shard_id][:] = [-1, 0, 0, 0]
        process = self._ctx.Process(
            target=_shard_main, name=f'weights_shard_{shard_id}', daemon=True,
            args=(shard_id, self.ps_cfg.num_shards, self.codec_cfg, self._queues[shard_id],
                  self.board_names[shard_id], self._status[shard_id]))
        process.start()
        self._procs[shard_id] = process
        self._send(shard_id, self.committer.full(shard_id))

    def _send(self, shard_id: int, packet: ShardPacket) -> None:
        data = packet.to_bytes()
        self.bytes_committed += len(data)
        self._queues[shard_id].put(data)

    def publish(self, state: PolicyState) -> int | None:
        """
        Commit the learner's policy state to every shard.

        :param state: the actor and normalizer statistics to hand out.
        :returns: the new version, or ``None`` when nothing changed or the state is unusable
            (non-finite: the committer refuses it, workers keep the last good policy).
        """
        self.maintain()
        packets = self.committer.commit(state)
        if packets is None:
            return None
        for packet in packets:
            self._send(packet.shard_id, packet)
        return self.committer.version

    def maintain(self) -> list[int]:
        """
        Respawn dead shard processes and re-sync the shards that asked for a full commit.

        :returns: the shards respawned.
        """
        respawned = []
        for i, process in enumerate(self._procs):
            if not process.is_alive():
                process.join(0)
                self._queues[i].cancel_join_thread()
                self._queues[i].close()
                self._start(i)
                self.respawns += 1
                respawned.append(i)
            elif self._status[i][_NEEDS_FULL]:
                self._status[i][_NEEDS_FULL] = 0
                self._send(i, self.committer.full(i))
                self.resyncs += 1
        return respawned

    def alive(self) -> list[bool]:
        """Return whether each shard process is running."""
        return [p.is_alive() for p in self._procs]

    def pids(self) -> list[int]:
        """Return the shard processes' ids."""
        return [p.pid for p in self._procs]

    def stats(self) -> dict[str, float]:
        """Return the learner-side counters and every shard's version, as metrics."""
        out = {'weights/version': self.committer.version,
               'weights/commits': self.committer.commits,
               'weights/refused': self.committer.refused,
               'weights/shard_respawns': self.respawns, 'weights/shard_resyncs': self.resyncs,
               'weights/bytes_committed': self.bytes_committed}
        for i, status in enumerate(self._status):
            out[f'weights/shard_{i}_version'] = status[_VERSION]
            out[f'weights/shard_{i}_rejected'] = status[_REJECTED]
        return out

    def close(self, timeout: float = 5.0) -> None:
        """Stop the shard processes and remove the boards."""
        if self._closed:
            return
        self._closed = True
        for i, process in enumerate(self._procs):
            if process.is_alive():
                self._queues[i].put(None)
        for i, process in enumerate(self._procs):
            process.join(timeout)
            if process.is_alive():
                process.kill()
                process.join()
            self._queues[i].cancel_join_thread()
            self._queues[i].close()
        for latest, key in self.boards:
            latest.close()
            key.close()

    def __enter__(self) -> 'LocalWeightPath':
        """Return the path itself."""
        return self

    def __exit__(self, *exc: Any) -> None:
        """Close the path."""
        self.close()


class LocalWeightReceiver(WeightReceiver):
    """
    Worker side of the local path: a :class:`WeightReceiver` on the shards' shared boards.

    Pickles as the board names and what it expects (a spawned worker re-attaches).

    :param board_names: :attr:`LocalWeightPath.board_names`.
    :param obs_dim: the observation width the policy must take (not checked when ``None``).
    :param expect: what the worker expects of a packet, its own policy's layout first
        (:meth:`Expectation.of_policy`); the shard count is that of the boards.
    """

    def __init__(self, board_names: list[tuple[str, str]], obs_dim: int | None = None,
                 expect: Expectation | None = None):
        self.board_names = [tuple(pair) for pair in board_names]
        expect = expect if expect is not None else Expectation(obs_dim=obs_dim)
        if expect.num_shards is None:
            expect = dataclasses.replace(expect, num_shards=len(self.board_names))
        super().__init__([(WeightBoard(latest), WeightBoard(key))
                          for latest, key in self.board_names], obs_dim, expect=expect)

    def __reduce__(self):
        """Pickle as the board names and the expectation."""
        return (LocalWeightReceiver, (self.board_names, self.obs_dim, self.expect))
