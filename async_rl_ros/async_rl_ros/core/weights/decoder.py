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
Worker side of the weight codec: :class:`WeightDecoder` checks a packet, then applies it.

A packet is checked whole before it changes anything: its CRC, its version against the one
held (:meth:`WeightDecoder.is_stale`), a delta's keyframe (:meth:`WeightDecoder.lacks_base`),
tensor names and shapes, the normalizer statistics it carries, and every decoded value
(finite, and within ``max_abs`` when set). A refused packet raises :class:`CodecError`, is
counted by reason and leaves the last good policy in place. The format and the encoder are in
:mod:`async_rl_ros.core.weights.codec`, which re-exports this class.
"""

from __future__ import annotations

import collections
import struct
from typing import Iterable, Mapping

from async_rl_ros.core.records import PolicyState, PolicyStateError
from async_rl_ros.core.weights.packet import CodecError, REJECT_REASONS, WeightPacket
import numpy as np

__all__ = ['WeightDecoder']


class WeightDecoder:
    """
    Worker side: rebuild float32 tensors from packets and reject bad packets.

    A rejected packet raises :class:`CodecError`, is counted in :attr:`rejected` by reason
    and leaves the state untouched, so the caller keeps acting with its last good policy.
    The decoder keeps the last keyframe (full packet) that deltas apply to.

    :param max_abs: largest magnitude of a decoded weight (``'bounds'``); ``None``: finite.
    """

    def __init__(self, max_abs: float | None = None):
        self.max_abs = max_abs
        self.version = -1
        self.key_version = -1
        self.accepted = 0
        self.rejected: collections.Counter[str] = collections.Counter()
        self._state: dict[str, np.ndarray] = {}
        self._key: dict[str, np.ndarray] = {}
        self._extras: dict[str, np.ndarray] = {}

    @property
    def tensors(self) -> dict[str, np.ndarray]:
        """Return copies of the current float32 tensors; empty before the first packet."""
        return {k: v.copy() for k, v in self._state.items()}

    @property
    def extras(self) -> dict[str, np.ndarray]:
        """Return copies of the latest extras, i.e. the normalizer statistics."""
        return {k: v.copy() for k, v in self._extras.items()}

    def reset(self) -> None:
        """Forget the state, e.g. to accept a new network architecture (counters stay)."""
        self.version = self.key_version = -1
        self._state, self._key, self._extras = {}, {}, {}

    def lacks_base(self, packet: WeightPacket) -> bool:
        """Return whether ``packet`` is a delta on a keyframe this decoder does not hold."""
        return packet.is_delta and (self.key_version < 0
                                    or packet.base_version != self.key_version)

    def is_stale(self, packet: WeightPacket) -> bool:
        """
        Return whether ``packet`` brings nothing newer than what the decoder holds.

        A full packet of the version held is new when that version came by a delta: it
        re-bases the decoder on a keyframe (a shard that was re-synced serves one).
        """
        if packet.version != self.version:
            return packet.version < self.version
        return packet.is_delta or self.key_version == self.version

    def apply_bytes(self, data: bytes | bytearray | memoryview) -> dict[str, np.ndarray]:
        """
        Parse and apply a serialized packet.

        :param data: bytes written by :meth:`WeightPacket.to_bytes`.
        :returns: the new float32 tensors (copies).
        :raises CodecError: the packet is rejected (and counted).
        """
        try:
            packet = WeightPacket.from_bytes(data)
        except CodecError as exc:
            self.rejected[exc.reason] += 1
            raise
        return self.apply(packet)

    def apply(self, packet: WeightPacket, context: bytes = b'') -> dict[str, np.ndarray]:
        """
        Verify a packet and apply it: full packets replace the state, deltas add to the keyframe.

        :param packet: a packet from :meth:`WeightEncoder.encode` or a ROS message.
        :param context: the bytes the transport's CRC covers besides the body.
        :returns: the new float32 tensors (copies).
        :raises CodecError: ``'crc'``, ``'version'`` (not newer than the current one),
            ``'base_version'`` (a delta on another keyframe), ``'shape'`` (names or shapes
            differ from the known ones, payload does not fit), ``'encoding'``,
            ``'non_finite'``, ``'extras'`` (normalizer statistics a policy would act with NaN
            on) or ``'format'``; the packet is counted and changes nothing.
        """
        try:
            state, extras = self._decode(packet, context)
        except CodecError as exc:
            self.rejected[exc.reason] += 1
            raise
        self._state, self._extras = state, extras
        if not packet.is_delta:
            self._key, self.key_version = state, int(packet.version)
        self.version = int(packet.version)
        self.accepted += 1
        return self.tensors

    def _decode(self, packet: WeightPacket, context: bytes
                ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        try:
            crc = packet.compute_crc(context)
        except (ValueError, struct.error) as exc:
            raise CodecError('format', str(exc)) from None
        if crc != packet.crc32:
            raise CodecError('crc', f'crc32 {crc:#010x} != {packet.crc32:#010x}')
        if self.is_stale(packet):
            raise CodecError('version', f'version {packet.version} is not newer than '
                             f'{self.version}')
        if packet.base_version < -1:
            raise CodecError('format', f'base_version {packet.base_version}')
        if self.lacks_base(packet):
            raise CodecError('base_version', f'delta on version {packet.base_version}, the '
                             f'keyframe held is {self.key_version}')
        names = [t.name for t in packet.tensors]
        if len(set(names)) != len(names):
            raise CodecError('format', 'duplicate tensor names')
        layout = {t.name: t.shape for t in packet.tensors}
        known = {k: v.shape for k, v in self._state.items()}
        if known and layout != known:
            raise CodecError('shape', f'tensors {_diff(layout, known)} differ from the known '
                             'ones')
        for key, value in packet.extras.items():
            if key in self._extras and value.shape != self._extras[key].shape:
                raise CodecError('shape', f'extra {key}: {value.shape} != '
                                 f'{self._extras[key].shape}')
        extras = dict(self._extras)
        extras.update((k, v.copy()) for k, v in packet.extras.items())
        _check_extras(extras)  # before anything is accepted
        state = {}
        for t in packet.tensors:
            value = t.values()
            if packet.is_delta:
                with np.errstate(over='ignore', invalid='ignore'):
                    value = self._key[t.name] + value
            if not np.isfinite(value).all():
                raise CodecError('non_finite', f'{t.name} decodes to non-finite values')
            if self.max_abs is not None and value.size and np.abs(value).max() > self.max_abs:
                raise CodecError('bounds', f'{t.name} decodes beyond +-{self.max_abs:g}')
            state[t.name] = value
        return state, extras

    def stats(self) -> dict[str, int]:
        """
        Return the counters as metrics.

        :returns: ``codec/accepted``, ``codec/rejected`` and ``codec/rejected_<reason>`` for
            every reason in :data:`REJECT_REASONS`, plus ``codec/version``.
        """
        out = {'codec/accepted': self.accepted, 'codec/rejected': sum(self.rejected.values()),
               'codec/version': self.version}
        out.update({f'codec/rejected_{r}': self.rejected[r] for r in REJECT_REASONS})
        return out

    def policy_state(self, obs_dim: int | None = None) -> PolicyState | None:
        """
        Return the current weights and normalizer statistics as a :class:`PolicyState`.

        :param obs_dim: the observation width the caller expects (checked when given).
        :returns: ``None`` before the first packet.
        :raises CodecError: ``'extras'`` if the statistics are missing or a policy would act
            with NaN on them (the packet is counted as rejected by the caller's decoder).
        """
        if self.version < 0:
            return None
        try:
            return PolicyState.from_parts(self._state, self._extras, self.version, obs_dim)
        except PolicyStateError as exc:
            raise CodecError('extras', str(exc)) from None


def _check_extras(extras: Mapping[str, np.ndarray]) -> None:
    """Refuse normalizer statistics a policy would act with NaN on (those present)."""
    present = {k: extras[k] for k in PolicyState.EXTRAS if k in extras}
    if not present:
        return
    known = next((v for k, v in present.items() if k != 'obs_clip'), np.zeros(1))
    width = known.shape[-1] if known.ndim else 1
    filled = {'obs_mean': np.zeros(width), 'obs_std': np.ones(width), 'obs_clip': 1.0}
    try:
        PolicyState.from_parts({}, {**filled, **present}, 0)
    except PolicyStateError as exc:
        raise CodecError('extras', str(exc)) from None


def _diff(a: Mapping[str, tuple], b: Mapping[str, tuple]) -> list[str]:
    keys: Iterable[str] = sorted(set(a) | set(b))
    return [k for k in keys if a.get(k) != b.get(k)]
