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
The parameter server split over processes: learner commits, shard replicas, worker assembly.

:class:`~async_rl_ros.core.weights.parameter_server.ParameterServer` keeps every shard in one
process. When each shard is its own process (a ROS 2 ``param_server`` node per shard) three
transport-free roles remain, and this module holds them:

* :class:`ShardedCommitter` (learner): the delayed update of
  :class:`~async_rl_ros.core.weights.parameter_server.CommitAccumulator`, applied to a
  :class:`ParameterServer` *mirror* that is the routing table (which shard holds which
  partition) and the authoritative copy a restarted shard re-syncs from. Every commit becomes
  one :class:`ShardPacket` per shard: float32 deltas of the partitions that shard holds.
* :class:`ShardReplica` (one shard): applies the commits addressed to it -- a full commit
  (re)initializes it, a delta commit must name its current version -- and serves its
  partitions as a full int8 :class:`~async_rl_ros.core.weights.codec.WeightPacket`.
* :class:`ShardAssembler` (worker): verifies each shard's packets with a
  :class:`~async_rl_ros.core.weights.codec.WeightDecoder` and, once shards at one version together
  hold every partition, rebuilds the policy state a worker loads.

A :class:`ShardPacket` carries exactly the fields of the ``WeightsCommit`` and
``PolicyWeights`` messages. A partition of a tensor with two or more dimensions that starts
and ends on row boundaries travels as rows (``(rows, row length)``), so per-channel
quantization keeps one scale per output row; other partitions travel flat.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Any, Mapping

from async_rl_ros.core.config import ParameterServerConfig
from async_rl_ros.core.records import PolicyState, PolicyStateError
from async_rl_ros.core.weights.codec import (CodecConfig, CodecError, ENCODING_FP32,
                                             QuantizedTensor, WeightDecoder, WeightEncoder,
                                             WeightPacket)
from async_rl_ros.core.weights.parameter_server import (CommitAccumulator, ParameterServer,
                                                        ParameterShard, Partition,
                                                        partition_layout)
import numpy as np
import torch

__all__ = ['ShardPacket', 'ShardedCommitter', 'ShardReplica', 'ShardAssembler', 'shard_name',
           'chunk_shape']


def shard_name(index: int) -> str:
    """Return the ring id of shard ``index`` (``shard_0``, ``shard_1``, ...)."""
    return f'shard_{int(index)}'


def chunk_shape(part: Partition, tensor_shape: tuple[int, ...]) -> tuple[int, ...]:
    """
    Return the shape a partition travels in: whole rows when it is row-aligned, else flat.

    :param part: the partition.
    :param tensor_shape: the shape of its tensor.
    :returns: ``(rows, row length)`` or ``(size,)``.
    """
    if len(tensor_shape) >= 2:
        row = math.prod(tensor_shape[1:])
        if row and part.start % row == 0 and part.size % row == 0:
            return (part.size // row, row)
    return (part.size,)


@dataclasses.dataclass
class ShardPacket:
    """
    What travels between the learner, a shard and the workers for one shard.

    :param shard_id: index of the shard (0 .. ``num_shards`` - 1).
    :param num_shards: shards in the cluster.
    :param chunk_size: floats per partition.
    :param layout: every tensor of the model, ``{name: shape}``.
    :param packet: version, base version (-1: values), the partitions as tensors named by
        partition key, the normalizer statistics as extras, and the CRC.
    """

    shard_id: int
    num_shards: int
    chunk_size: int
    layout: dict[str, tuple[int, ...]]
    packet: WeightPacket

    def partitions(self) -> dict[str, Partition]:
        """
        Return the partitions of the layout by key.

        :raises CodecError: ``'shape'`` if the layout or the chunk size is unusable.
        """
        try:
            return {p.key: p for p in partition_layout(self.layout, self.chunk_size)}
        except (ValueError, TypeError) as exc:
            raise CodecError('shape', f'layout: {exc}') from None


def _fp32(name: str, values: np.ndarray, shape: tuple[int, ...]) -> QuantizedTensor:
    return QuantizedTensor(name, shape, ENCODING_FP32, np.zeros(0, np.float32),
                           np.zeros(0, np.uint8),
                           np.ascontiguousarray(values, dtype='<f4').tobytes())


# ====================================================================== learner
class ShardedCommitter:
    """
    Learner side: delayed commits, split per shard.

    :param cfg: shards, replicas, ring, chunk size, ``commit_every``.
    :param tensors: the actor's initial tensors (numpy or torch).
    :param version: their version.
    """

    def __init__(self, cfg: ParameterServerConfig, tensors: Mapping[str, Any], version: int = 0):
        self.cfg = cfg
        arrays = {k: _numpy(v) for k, v in tensors.items()}
        self.server = ParameterServer(cfg, [shard_name(i) for i in range(cfg.num_shards)])
        self.server.initialize(arrays, version=version)
        self.accumulator = CommitAccumulator(cfg.commit_every, arrays)
        self.layout = {k: tuple(v.shape) for k, v in arrays.items()}
        self._parts = {p.key: p for p in self.server.layout}
        assignment = self.server.assignment()
        self._held = {i: [p for p in self.server.layout if shard_name(i) in assignment[p.key]]
                      for i in range(cfg.num_shards)}

    @property
    def version(self) -> int:
        """Return the cluster version, that of the last commit."""
        return int(self.server.version)

    def partitions_of(self, shard_id: int) -> list[str]:
        """Return the keys of the partitions shard ``shard_id`` holds, in layout order."""
        return [p.key for p in self._held[int(shard_id)]]

    def commit(self, tensors: Mapping[str, Any], extras: Mapping[str, Any]
               ) -> list[ShardPacket] | None:
        """
        Commit the change since the last commit; return one delta packet per shard.

        :param tensors: the actor's current tensors.
        :param extras: normalizer statistics sent along.
        :returns: ``None`` when nothing changed, else the packets of every shard.
        """
        delta = self.accumulator.flush({k: _numpy(v) for k, v in tensors.items()})
        if delta is None:
            return None
        base = self.version
        version = self.server.commit(delta, base)
        flat = {k: v.reshape(-1) for k, v in delta.items()}
        return [self._packet(i, base, version, flat, extras) for i in range(self.cfg.num_shards)]

    def full(self, shard_id: int, extras: Mapping[str, Any]) -> ShardPacket:
        """
        Return the values of a shard's partitions at the current version (a re-sync).

        :param shard_id: the shard to (re)initialize.
        :param extras: normalizer statistics sent along.
        """
        _, actor = self.server.read()
        flat = {k: np.asarray(v, np.float32).reshape(-1) for k, v in actor.items()}
        return self._packet(int(shard_id), -1, self.version, flat, extras)

    def _packet(self, shard_id: int, base: int, version: int, flat: Mapping[str, np.ndarray],
                extras: Mapping[str, Any]) -> ShardPacket:
        tensors = [_fp32(p.key, flat[p.tensor][p.start:p.stop],
                         chunk_shape(p, self.layout[p.tensor])) for p in self._held[shard_id]]
        packet = WeightPacket(version, base, tensors, dict(extras)).seal()
        return ShardPacket(shard_id, self.cfg.num_shards, self.cfg.chunk_size,
                           dict(self.layout), packet)


# ====================================================================== shard
class ShardReplica:
    """
    One parameter-server shard: applies its commits, serves its partitions.

    :param shard_id: index of this shard.
    :param num_shards: shards in the cluster.
    :param codec_cfg: weight codec (packets served are always full ones).
    """

    def __init__(self, shard_id: int, num_shards: int, codec_cfg: CodecConfig | None = None):
        self.shard_id, self.num_shards = int(shard_id), int(num_shards)
        self.shard = ParameterShard(shard_name(shard_id))
        self.codec_cfg = dataclasses.replace(codec_cfg or CodecConfig(), delta=False)
        self.encoder = WeightEncoder(self.codec_cfg)
        self.version = -1
        self.layout: dict[str, tuple[int, ...]] = {}
        self.chunk_size = 0
        self.extras: dict[str, np.ndarray] = {}
        self.applied = 0
        self.rejected: collections.Counter[str] = collections.Counter()
        self._shapes: dict[str, tuple[int, ...]] = {}
        self._served: ShardPacket | None = None

    def apply(self, commit: ShardPacket) -> None:
        """
        Apply a commit addressed to this shard; a bad one is counted and changes nothing.

        :param commit: a full commit (``base_version == -1``) or a delta on :attr:`version`.
        :raises CodecError: ``'format'`` (another shard's, or partitions this shard does not
            hold), ``'crc'``, ``'version'``, ``'base_version'`` (the shard must be re-synced
            with a full commit), ``'shape'`` or ``'encoding'``.
        """
        try:
            self._apply(commit)
        except CodecError as exc:
            self.rejected[exc.reason] += 1
            raise
        self.applied += 1

    def _apply(self, commit: ShardPacket) -> None:
        packet = commit.packet
        if (commit.shard_id, commit.num_shards) != (self.shard_id, self.num_shards):
            raise CodecError('format', f'commit for shard {commit.shard_id}/{commit.num_shards}'
                             f', this is {self.shard_id}/{self.num_shards}')
        if packet.compute_crc() != packet.crc32:
            raise CodecError('crc', 'commit crc32 mismatch')
        if packet.version <= self.version:
            raise CodecError('version', f'version {packet.version} is not newer than '
                             f'{self.version}')
        parts = commit.partitions()
        values = {}
        for t in packet.tensors:
            part = parts.get(t.name)
            if part is None or t.numel != part.size:
                raise CodecError('shape', f'{t.name} is not a partition of the layout')
            values[t.name] = t.values().reshape(-1)
        if not packet.is_delta:
            self.shard.clear()
            for key, flat in values.items():
                self.shard.load(parts[key], flat, packet.version)
            self.layout, self.chunk_size = dict(commit.layout), commit.chunk_size
            self._shapes = {k: tuple(t.shape) for k, t in zip(values, packet.tensors)}
        else:
            if self.version < 0 or packet.base_version != self.version:
                raise CodecError('base_version', f'delta on version {packet.base_version}, '
                                 f'the shard is at {self.version}')
            if set(values) != set(self.shard.keys) or commit.layout != self.layout:
                raise CodecError('shape', 'the delta does not cover the partitions held')
            for key, flat in values.items():
                self.shard.apply(key, flat, packet.version)
        self.version = int(packet.version)
        self.extras = dict(packet.extras)

    def weights(self) -> ShardPacket | None:
        """Return the held partitions as a full int8 packet (``None`` before the first commit)."""
        if self.version < 0:
            return None
        if self._served is not None and self._served.packet.version == self.version:
            return self._served
        held = self.shard.read()
        tensors = {key: values.reshape(self._shapes[key]) for key, (values, _) in held.items()}
        packet = self.encoder.encode_full(tensors, self.version, self.extras)
        self._served = ShardPacket(self.shard_id, self.num_shards, self.chunk_size,
                                   dict(self.layout), packet)
        return self._served

    def stats(self) -> dict[str, int]:
        """Return ``version``, ``partitions``, ``applied`` and ``rejected``."""
        return {'version': self.version, 'partitions': len(self.shard),
                'applied': self.applied, 'rejected': sum(self.rejected.values())}


# ====================================================================== worker
class ShardAssembler:
    """
    Worker side: verify shard packets, rebuild the policy once every partition is there.

    Each shard has its own :class:`WeightDecoder` (CRC, monotonic versions, shapes). The
    policy of version ``v`` is assembled as soon as shards at ``v`` together hold every
    partition of the layout (with replicas, not every shard is needed).
    """

    def __init__(self):
        self.decoders: dict[int, WeightDecoder] = {}
        self.version = -1
        self.rejected: collections.Counter[str] = collections.Counter()
        self._held: dict[int, tuple[int, dict[str, np.ndarray], dict[str, np.ndarray]]] = {}
        self._layout: dict[str, tuple[int, ...]] = {}
        self._chunk = 0

    @property
    def accepted(self) -> int:
        """Return the shard packets accepted."""
        return sum(d.accepted for d in self.decoders.values())

    @property
    def rejected_total(self) -> int:
        """Return the shard packets rejected, for every reason."""
        decoded = sum(sum(d.rejected.values()) for d in self.decoders.values())
        return decoded + sum(self.rejected.values())

    def add(self, sp: ShardPacket) -> PolicyState | None:
        """
        Verify and store one shard packet; return a new policy state when one is complete.

        :param sp: a shard's weights.
        :returns: the :class:`PolicyState` of a version newer than the last one returned, or
            ``None`` (incomplete, or a packet of a version already assembled: ignored).
        :raises CodecError: the packet is rejected (and counted); the state is unchanged.
        """
        parts = sp.partitions()
        if (sp.layout, sp.chunk_size) != (self._layout, self._chunk):
            if self._held:  # a new architecture: forget every shard's old packets
                for decoder in self.decoders.values():
                    decoder.reset()
                self._held.clear()
                self.version = -1
            self._layout, self._chunk = dict(sp.layout), int(sp.chunk_size)
        decoder = self.decoders.setdefault(int(sp.shard_id), WeightDecoder())
        for t in sp.packet.tensors:
            part = parts.get(t.name)
            if part is None or t.numel != part.size:
                self.rejected['shape'] += 1
                raise CodecError('shape', f'{t.name} is not a partition of the layout')
        if sp.packet.version <= self.version:
            return None  # a replica of a version already assembled (or an older one)
        tensors = decoder.apply(sp.packet)
        self._held[int(sp.shard_id)] = (
            int(sp.packet.version), {k: v.reshape(-1) for k, v in tensors.items()},
            decoder.extras)
        return self._assemble(parts)

    def _assemble(self, parts: Mapping[str, Partition]) -> PolicyState | None:
        newest = max(version for version, _, _ in self._held.values())
        if newest <= self.version:
            return None
        chunks: dict[str, np.ndarray] = {}
        extras: dict[str, np.ndarray] = {}
        for version, held, shard_extras in self._held.values():
            if version == newest:
                chunks.update(held)
                extras = shard_extras
        if set(chunks) != set(parts):
            return None
        actor = {}
        for name, shape in self._layout.items():
            flat = np.empty(math.prod(shape), np.float32)
            for part in parts.values():
                if part.tensor == name:
                    flat[part.start:part.stop] = chunks[part.key]
            actor[name] = flat.reshape(shape)
        try:
            state = PolicyState.from_parts(actor, extras, newest)
        except PolicyStateError as exc:
            self.rejected['extras'] += 1
            raise CodecError('extras', str(exc)) from None
        self.version = newest
        return state


def _numpy(value: Any) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    return np.asarray(value, dtype=np.float32)
