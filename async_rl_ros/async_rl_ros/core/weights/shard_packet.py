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
The shard packet: what travels between the learner, a shard and the workers for one shard.

A :class:`ShardPacket` carries exactly the fields of the ``WeightsCommit`` and
``PolicyWeights`` messages: the shard's id and the cluster's shard count, the chunk size and
the model layout the partitions derive from, and a
:class:`~async_rl_ros.core.weights.codec.WeightPacket`. Its CRC covers the shard fields
(:meth:`ShardPacket.context`) as well as the packet body, and readers check it before
anything else, so a corrupt layout changes nothing. :meth:`ShardPacket.to_bytes` is the
shared-memory form. The shard fields begin with :data:`SHARD_FORMAT` (2: the ``run_id`` the
committer picked at start, which tells a worker a restarted learner from a forged version;
format 1 had none) and are checked against what a worker expects by
:mod:`async_rl_ros.core.weights.expect`. A partition of a tensor with two or more
dimensions that starts and ends on row boundaries travels as rows (``(rows, row length)``),
so per-channel quantization keeps one scale per output row; other partitions travel flat.
"""

from __future__ import annotations

import dataclasses
import math
import struct

from async_rl_ros.core.weights.codec import (CodecError, ENCODING_FP32, QuantizedTensor,
                                             WeightPacket)
from async_rl_ros.core.weights.parameter_server import Partition, partition_layout
import numpy as np

__all__ = ['ShardPacket', 'SHARD_FORMAT', 'shard_name', 'chunk_shape', 'fp32_tensor']

SHARD_FORMAT = 2  #: format of the shard fields (1: without ``run_id``)
_META = struct.Struct('<HQIIIH')
_LEN = struct.Struct('<I')


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
        partition key, the normalizer statistics as extras, and the CRC (of :meth:`context`
        and the body).
    :param run_id: the committer's 64-bit run identity: a learner restart starts a new run.
    """

    shard_id: int
    num_shards: int
    chunk_size: int
    layout: dict[str, tuple[int, ...]]
    packet: WeightPacket
    run_id: int = 0

    def context(self) -> bytes:
        """
        Return the shard fields as the bytes the CRC covers before the packet body.

        :raises CodecError: ``'format'`` if a field cannot be encoded.
        """
        try:
            parts = [_META.pack(SHARD_FORMAT, self.run_id, self.shard_id, self.num_shards,
                                self.chunk_size, len(self.layout))]
            for name, shape in self.layout.items():
                raw = name.encode('utf-8')
                parts += [struct.pack('<HB', len(raw), len(shape)), raw,
                          struct.pack(f'<{len(shape)}I', *shape)]
        except (struct.error, TypeError, UnicodeError) as exc:
            raise CodecError('format', f'shard fields: {exc}') from None
        return b''.join(parts)

    def seal(self) -> 'ShardPacket':
        """Store the CRC of the shard fields and the packet; return the shard packet."""
        self.packet.seal(self.context())
        return self

    def verify(self) -> None:
        """
        Check the CRC of the shard fields and the packet.

        :raises CodecError: ``'crc'`` (or ``'format'`` for fields that cannot be encoded).
        """
        try:
            crc = self.packet.compute_crc(self.context())
        except (ValueError, struct.error) as exc:
            raise CodecError('format', str(exc)) from None
        if crc != self.packet.crc32:
            raise CodecError('crc', f'crc32 {crc:#010x} != {self.packet.crc32:#010x}')

    def partitions(self) -> dict[str, Partition]:
        """
        Return the partitions of the layout by key.

        :raises CodecError: ``'shape'`` if the layout or the chunk size is unusable.
        """
        try:
            return {p.key: p for p in partition_layout(self.layout, self.chunk_size)}
        except (ValueError, TypeError) as exc:
            raise CodecError('shape', f'layout: {exc}') from None

    def to_bytes(self) -> bytes:
        """Serialize: context length, context, then :meth:`WeightPacket.to_bytes`."""
        context = self.context()
        return _LEN.pack(len(context)) + context + self.packet.to_bytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> 'ShardPacket':
        """
        Parse :meth:`to_bytes` output and verify its CRC.

        :raises CodecError: ``'truncated'``, ``'format'`` or ``'crc'``.
        """
        data = bytes(data)
        if len(data) < _LEN.size + _META.size:
            raise CodecError('truncated', f'{len(data)} bytes')
        size, = _LEN.unpack_from(data, 0)
        end = _LEN.size + size
        if end > len(data):
            raise CodecError('truncated', f'context of {size} bytes')
        fmt, run_id, shard_id, num_shards, chunk, count = _META.unpack_from(data, _LEN.size)
        if fmt != SHARD_FORMAT:
            raise CodecError('format', f'shard fields of format {fmt}, not {SHARD_FORMAT}')
        pos, layout = _LEN.size + _META.size, {}
        try:
            for _ in range(count):
                n, ndim = struct.unpack_from('<HB', data, pos)
                name = data[pos + 3:pos + 3 + n].decode('utf-8')
                pos += 3 + n
                layout[name] = struct.unpack_from(f'<{ndim}I', data, pos)
                pos += 4 * ndim
        except (struct.error, UnicodeError) as exc:
            raise CodecError('format', f'shard layout: {exc}') from None
        if pos != end or len(layout) != count:
            raise CodecError('format', 'inconsistent shard layout')
        packet = WeightPacket.from_bytes(data[end:], verify_crc=False)
        sp = cls(shard_id, num_shards, chunk, layout, packet, run_id)
        sp.verify()
        return sp


def fp32_tensor(name: str, values: np.ndarray, shape: tuple[int, ...]) -> QuantizedTensor:
    """Return float32 values as an unquantized tensor of a packet (what commits carry)."""
    return QuantizedTensor(name, shape, ENCODING_FP32, np.zeros(0, np.float32),
                           np.zeros(0, np.uint8),
                           np.ascontiguousarray(values, dtype='<f4').tobytes())
