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
The worker's side of the weight path: check shard packets, rebuild the policy from them.

:class:`ShardAssembler` checks each shard's packets against what the worker expects
(:mod:`async_rl_ros.core.weights.expect`: its own layout, shard ids, extras, versions, the
run), verifies them with a :class:`~async_rl_ros.core.weights.codec.WeightDecoder` and, once
shards at one version together hold every partition, rebuilds the :class:`PolicyState`,
stamped with the learner run it came from. The packets come from the replicas of
:mod:`async_rl_ros.core.weights.sharded_weights`.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Mapping

from async_rl_ros.core.records import PolicyState, PolicyStateError
from async_rl_ros.core.weights.codec import CodecError, WeightDecoder
from async_rl_ros.core.weights.expect import (check_extras, check_fields, check_tensors,
                                              check_versions, Expectation)
from async_rl_ros.core.weights.parameter_server import Partition
from async_rl_ros.core.weights.shard_packet import chunk_shape, ShardPacket
import numpy as np

__all__ = ['ShardAssembler']


class ShardAssembler:
    """
    Worker side: check and verify shard packets, rebuild the policy once every partition is there.

    Every packet is checked against :attr:`expect` before anything is allocated or changed
    (:mod:`async_rl_ros.core.weights.expect`), then by its shard's :class:`WeightDecoder`
    (CRC, monotonic versions, keyframe, bounded weights). The policy of version ``v`` is
    assembled as soon as shards at ``v`` together hold every partition of the layout (with
    replicas, not every shard is needed). A packet not used is counted: in :attr:`rejected`
    (or its shard decoder's) by reason, or in :attr:`ignored` (``'stale'``: a version held).

    :param obs_dim: the observation width the policy must take (not checked when ``None``).
    :param expect: what the worker expects (default: bounds only, the first layout pinned).
    """

    def __init__(self, obs_dim: int | None = None, expect: Expectation | None = None):
        expect = expect if expect is not None else Expectation()
        if expect.obs_dim is None and obs_dim is not None:
            expect = dataclasses.replace(expect, obs_dim=int(obs_dim))
        self.expect = expect
        self.obs_dim = obs_dim if obs_dim is not None else expect.obs_dim
        self.decoders: dict[int, WeightDecoder] = {}
        self.version = -1
        self.run_id: int | None = None
        self.retired: collections.deque[int] = collections.deque(maxlen=64)  # replaced runs
        self.rejected: collections.Counter[str] = collections.Counter()
        self.ignored: collections.Counter[str] = collections.Counter()
        self._accepted_before = 0  # by decoders of a replaced run
        self._layout: dict[str, tuple[int, ...]] = {}
        self._chunk = 0
        self._pinned: dict[str, tuple[int, ...]] | None = None
        self._width: int | None = None

    @property
    def accepted(self) -> int:
        """Return the shard packets accepted."""
        return self._accepted_before + sum(d.accepted for d in self.decoders.values())

    @property
    def rejected_total(self) -> int:
        """Return the shard packets rejected, for every reason."""
        decoded = sum(sum(d.rejected.values()) for d in self.decoders.values())
        return decoded + sum(self.rejected.values())

    def _same_run(self, sp: ShardPacket) -> bool:
        return (self.run_id is not None and sp.run_id == self.run_id
                and (sp.layout, sp.chunk_size) == (self._layout, self._chunk))

    def lacks_base(self, sp: ShardPacket) -> bool:
        """Return whether ``sp`` is a delta on a keyframe this worker does not hold."""
        decoder = self.decoders.get(int(sp.shard_id))
        if decoder is None or not self._same_run(sp):
            return sp.packet.is_delta
        return decoder.lacks_base(sp.packet)

    def add_latest(self, sp: ShardPacket, keyframe: ShardPacket | None = None
                   ) -> PolicyState | None:
        """
        Add a shard's latest packet, after its keyframe when this worker lacks that base.

        :param sp: the newest packet of a shard (a keyframe or a delta on one).
        :param keyframe: the shard's current keyframe, if the transport has it.
        :returns: like :meth:`add` (the keyframe's state if only it completes a policy).
        :raises CodecError: the latest packet is rejected (and counted).
        """
        state = None
        if keyframe is not None and self.lacks_base(sp):
            try:
                state = self.add(keyframe)
            except CodecError:
                pass  # counted; the latest packet is then rejected for its base too
        try:
            return self.add(sp) or state
        except CodecError:
            if state is None:
                raise
            return state

    def screen(self, sp: ShardPacket, waiting: bool = False
               ) -> tuple[WeightDecoder | None, bool, dict]:
        """
        Check a packet against :attr:`expect` and the run held, allocating nothing big.

        :param sp: a shard's weights.
        :param waiting: the packet is to wait for its keyframe, not to be applied: a delta of
            a new run passes (a worker that starts or restarts mid-run may see the newest
            delta before the keyframe it rests on).
        :returns: the shard's decoder of this run (``None``: none), whether the packet is of
            a new run, and the partitions of its layout.
        :raises CodecError: the packet is rejected (and counted).
        """
        held = None
        try:
            sp.verify()  # the shard fields too, before anything is reset
            check_fields(sp, self.expect, self._pinned)
            held = self.decoders.get(int(sp.shard_id))
            new_run = self.run_id is None or sp.run_id != self.run_id
            if new_run and sp.run_id in self.retired:
                raise CodecError('run_id', f'run {sp.run_id:#x} was replaced by a newer run')
            if not new_run and not self._same_run(sp):
                raise CodecError('layout', 'the layout or chunk size changed within a run')
            if new_run:
                held = None
            newest_key = -1 if new_run else max(
                (d.key_version for d in self.decoders.values()), default=-1)
            check_versions(sp.packet, self.expect, new_run and not waiting, newest_key)
            parts = sp.partitions()  # bounded by check_fields
            check_tensors(sp.packet, parts, sp.layout, chunk_shape)
            check_extras(sp.packet.extras, self.expect, None if new_run else self._width)
        except CodecError as exc:
            (held.rejected if held is not None else self.rejected)[exc.reason] += 1
            raise
        return held, new_run, parts

    def add(self, sp: ShardPacket) -> PolicyState | None:
        """
        Check, verify and store one shard packet; return a new policy state when one is complete.

        :param sp: a shard's weights.
        :returns: the :class:`PolicyState` of a version newer than the last one returned, or
            ``None`` (incomplete, or a version the shard's decoder already has: counted in
            :attr:`ignored`).
        :raises CodecError: the packet is rejected (and counted); nothing changed.
        """
        shard = int(sp.shard_id)
        held, new_run, parts = self.screen(sp)
        decoder = held or WeightDecoder(self.expect.max_abs_weight)
        if decoder.is_stale(sp.packet):
            self.ignored['stale'] += 1  # a version (or a replica's copy) this shard already has
            return None
        try:
            decoder.apply(sp.packet, sp.context())
        except CodecError as exc:
            if held is None:
                self.rejected[exc.reason] += 1  # (a held decoder counts its own)
            raise
        if new_run:  # a learner (re)start: forget the old run, keep its counts
            for old in self.decoders.values():
                self.rejected.update(old.rejected)
                self._accepted_before += old.accepted
            if self.run_id is not None:
                self.retired.append(self.run_id)
            self.decoders, self.version, self.run_id = {}, -1, int(sp.run_id)
            self._layout, self._chunk = dict(sp.layout), int(sp.chunk_size)
            if not self.expect.layouts():
                self._pinned = dict(sp.layout)
        self._width = len(sp.packet.extras['obs_mean'])
        self.decoders[shard] = decoder
        return self._assemble(parts)

    def _assemble(self, parts: Mapping[str, Partition]) -> PolicyState | None:
        newest = max(d.version for d in self.decoders.values())
        if newest <= self.version:
            return None
        chunks: dict[str, np.ndarray] = {}
        extras: dict[str, np.ndarray] = {}
        for decoder in self.decoders.values():
            if decoder.version == newest:
                chunks.update((k, v.reshape(-1)) for k, v in decoder.tensors.items())
                extras = decoder.extras
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
            state = PolicyState.from_parts(actor, extras, newest, self.obs_dim)
        except PolicyStateError as exc:
            self.rejected['extras'] += 1
            raise CodecError('extras', str(exc)) from None
        self.version = newest
        return dataclasses.replace(state, run_id=self.run_id or 0)
