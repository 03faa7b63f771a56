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
The learner's side of the weight path: the committer and the shard replicas.

Each shard is its own process (a ``LocalWeightPath`` shard process locally, a ROS 2
``param_server`` node under ROS); what carries packets between them is the caller's business.
Two transport-free roles:

* :class:`ShardedCommitter` (learner): every commit takes the learner's :class:`PolicyState`
  and returns one :class:`ShardPacket` per shard with the float32 change of the partitions
  that shard holds (:func:`~async_rl_ros.core.weights.parameter_server.placement`). It keeps
  the values the shards hold, so :meth:`ShardedCommitter.full` re-syncs a (re)started shard.
* :class:`ShardReplica` (one shard): applies its commits -- a full commit (re)initializes it,
  a delta commit must name its current version -- and serves int8
  :class:`~async_rl_ros.core.weights.codec.WeightPacket` s: a keyframe (full packet) every
  ``codec.full_every`` packets and, in between, deltas on that keyframe (``codec.delta``).
  :meth:`ShardReplica.keyframe` is the full packet the latest one is based on, which a worker
  that lacks it (late join, respawn, missed packets) fetches once.

The worker's side, which checks and assembles what the shards serve, is
:class:`~async_rl_ros.core.weights.assembler.ShardAssembler`.

The committer picks a random 64-bit ``run_id`` at start; shards serve it and workers take a
packet of a new run only as a full keyframe, which resets the versions they hold.

What travels between them is a :class:`~async_rl_ros.core.weights.shard_packet.ShardPacket`
(re-exported here), whose CRC covers the shard fields and the layout too.
"""

from __future__ import annotations

import collections
import secrets
from typing import Mapping

from async_rl_ros.core.config import ParameterServerConfig
from async_rl_ros.core.records import PolicyState, PolicyStateError
from async_rl_ros.core.weights.codec import CodecConfig, CodecError, WeightEncoder, WeightPacket
from async_rl_ros.core.weights.parameter_server import partition_layout, placement
from async_rl_ros.core.weights.shard_packet import (chunk_shape, fp32_tensor, shard_name,
                                                    ShardPacket)
import numpy as np

__all__ = ['ShardPacket', 'ShardedCommitter', 'ShardReplica', 'shard_name', 'chunk_shape']


# ====================================================================== learner
class ShardedCommitter:
    """
    Learner side: commits of the policy state, split per shard.

    :param cfg: shards, replicas, ring, chunk size.
    :param initial: the policy state the shards start from (version included).
    :param run_id: this run's identity in every packet (default: 64 random bits).
    """

    def __init__(self, cfg: ParameterServerConfig, initial: PolicyState,
                 run_id: int | None = None):
        self.cfg = cfg
        self.run_id = secrets.randbits(64) if run_id is None else int(run_id)
        initial.check()
        self._values = {k: v.copy() for k, v in initial.tensors().items()}
        self.layout = {k: tuple(v.shape) for k, v in self._values.items()}
        self.parts = partition_layout(self.layout, cfg.chunk_size)
        self.placement = placement(self.parts, cfg)
        self._held = {i: [p for p in self.parts if i in self.placement[p.key]]
                      for i in range(cfg.num_shards)}
        self.version = int(initial.version)
        self.extras = initial.extras()
        self.commits = 0
        self.refused = 0  # states a worker could not act with: never committed

    @property
    def fp32_bytes(self) -> int:
        """Return the bytes of the actor in float32: what the codec's reduction is against."""
        return sum(v.nbytes for v in self._values.values())

    def partitions_of(self, shard_id: int) -> list[str]:
        """Return the keys of the partitions shard ``shard_id`` holds, in layout order."""
        return [p.key for p in self._held[int(shard_id)]]

    def commit(self, state: PolicyState) -> list[ShardPacket] | None:
        """
        Commit the change since the last commit; return one delta packet per shard.

        :param state: the learner's current policy state (its version is ignored: the
            commit's version is :attr:`version` + 1).
        :returns: ``None`` when nothing changed or the state is unusable (non-finite weights,
            bad normalizer statistics: counted in :attr:`refused`), else every shard's packet.
        """
        try:
            state.check()
        except PolicyStateError:
            self.refused += 1
            return None
        tensors, extras = state.tensors(), state.extras()
        if set(tensors) != set(self._values) or any(
                v.shape != self._values[k].shape for k, v in tensors.items()):
            raise ValueError('the actor layout changed; start a new committer')
        delta = {k: np.asarray(v - self._values[k], np.float32).reshape(-1)
                 for k, v in tensors.items()}
        same_extras = all(np.array_equal(extras[k], self.extras[k]) for k in extras)
        if same_extras and not any(d.any() for d in delta.values()):
            return None
        for key, value in delta.items():  # the shards' float32 operation, bit for bit
            self._values[key] += value.reshape(self._values[key].shape)
        base, self.version, self.extras = self.version, self.version + 1, extras
        self.commits += 1
        return [self._packet(i, base, delta) for i in range(self.cfg.num_shards)]

    def full(self, shard_id: int) -> ShardPacket:
        """Return the values of a shard's partitions at :attr:`version` (a re-sync)."""
        flat = {k: v.reshape(-1) for k, v in self._values.items()}
        return self._packet(int(shard_id), -1, flat)

    def _packet(self, shard_id: int, base: int, flat: Mapping[str, np.ndarray]) -> ShardPacket:
        tensors = [fp32_tensor(p.key, flat[p.tensor][p.start:p.stop],
                               chunk_shape(p, self.layout[p.tensor]))
                   for p in self._held[shard_id]]
        packet = WeightPacket(self.version, base, tensors, dict(self.extras))
        return ShardPacket(shard_id, self.cfg.num_shards, self.cfg.chunk_size,
                           dict(self.layout), packet, self.run_id).seal()


# ====================================================================== shard
class ShardReplica:
    """
    One parameter-server shard: applies its commits, serves its partitions.

    :param shard_id: index of this shard.
    :param num_shards: shards in the cluster.
    :param codec_cfg: weight codec of the packets served (deltas as ``codec.delta`` says).
    """

    def __init__(self, shard_id: int, num_shards: int, codec_cfg: CodecConfig | None = None):
        self.shard_id, self.num_shards = int(shard_id), int(num_shards)
        self.encoder = WeightEncoder(codec_cfg or CodecConfig())
        self.version = -1
        self.run_id = -1  # the run of the commits applied (-1: none yet)
        self.layout: dict[str, tuple[int, ...]] = {}
        self.chunk_size = 0
        self.extras: dict[str, np.ndarray] = {}
        self.applied = 0
        self.rejected: collections.Counter[str] = collections.Counter()
        self._values: dict[str, np.ndarray] = {}
        self._served: ShardPacket | None = None
        self._keyframe: ShardPacket | None = None

    def apply(self, commit: ShardPacket, serve: bool = True) -> None:
        """
        Apply a commit addressed to this shard; a bad one is counted and changes nothing.

        :param commit: a full commit (``base_version == -1``; at :attr:`version` too: a re-sync
            of a shard that refused a commit) or a delta on :attr:`version`.
        :param serve: encode the packet to serve now (a caller draining a backlog of commits
            serves only after the last one).
        :raises CodecError: ``'crc'``, ``'format'`` (another shard's), ``'version'``,
            ``'base_version'`` (the shard must be re-synced with a full commit), ``'shape'``
            or ``'encoding'``.
        """
        try:
            self._apply(commit)
        except CodecError as exc:
            self.rejected[exc.reason] += 1
            raise
        self.applied += 1
        if serve:
            self.serve()

    def _apply(self, commit: ShardPacket) -> None:
        commit.verify()
        packet = commit.packet
        if (commit.shard_id, commit.num_shards) != (self.shard_id, self.num_shards):
            raise CodecError('format', f'commit for shard {commit.shard_id}/{commit.num_shards}'
                             f', this is {self.shard_id}/{self.num_shards}')
        new_run = commit.run_id != self.run_id
        if new_run and packet.is_delta and self.version >= 0:  # (none held: 'base_version')
            raise CodecError('run_id', f'a delta of run {commit.run_id:#x}, the shard holds '
                             f'run {self.run_id:#x}')
        stale = packet.version < self.version
        if not new_run and (stale or (packet.version == self.version and packet.is_delta)):
            raise CodecError('version', f'version {packet.version} is not newer than '
                             f'{self.version}')
        parts = commit.partitions()
        values = {}
        for t in packet.tensors:
            part = parts.get(t.name)
            if part is None or t.numel != part.size:
                raise CodecError('shape', f'{t.name} is not a partition of the layout')
            values[t.name] = t.values()
        if not packet.is_delta:
            if commit.layout != self.layout or new_run:
                self.encoder = WeightEncoder(self.encoder.cfg)  # a new architecture or run
                self._served = None
            if packet.version > self.version or new_run:
                self.encoder.request_full()  # a re-sync starts a new keyframe
            self._values = {k: v.copy() for k, v in values.items()}
            self.layout, self.chunk_size = dict(commit.layout), commit.chunk_size
        else:
            if self.version < 0 or packet.base_version != self.version:
                raise CodecError('base_version', f'delta on version {packet.base_version}, '
                                 f'the shard is at {self.version}')
            if (set(values) != set(self._values) or commit.layout != self.layout
                    or any(v.shape != self._values[k].shape for k, v in values.items())):
                raise CodecError('shape', 'the delta does not cover the partitions held')
            for key, value in values.items():
                self._values[key] += value
        self.version = int(packet.version)
        self.run_id = int(commit.run_id)
        self.extras = dict(packet.extras)

    def serve(self) -> ShardPacket | None:
        """Encode the current state for serving, a keyframe or a delta on one; return it."""
        if self.version < 0:
            return None
        if self._served is None or self._served.packet.version != self.version:
            packet = self.encoder.encode(self._values, self.version, self.extras)
            self._served = ShardPacket(self.shard_id, self.num_shards, self.chunk_size,
                                       dict(self.layout), packet, self.run_id).seal()
            if not packet.is_delta:
                self._keyframe = self._served
        return self._served

    def weights(self) -> ShardPacket | None:
        """Return the latest packet served (``None`` before the first commit)."""
        return self.serve()

    def keyframe(self) -> ShardPacket | None:
        """Return the full packet the latest served packet is based on (or is)."""
        self.serve()
        return self._keyframe

    def stats(self) -> dict[str, int]:
        """Return ``version``, ``partitions``, ``applied`` and ``rejected``."""
        return {'version': self.version, 'partitions': len(self._values),
                'applied': self.applied, 'rejected': sum(self.rejected.values())}
