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
Weight packets: quantized tensors, the byte format and a CRC32 per packet.

Quantization is in :mod:`async_rl_ros.core.weights.quantize`; a tensor's ``encoding`` says
which codes its payload holds.

Packets also carry float32 ``extras`` sent as they are (normalizer statistics) and a CRC32.
The byte layout of :meth:`WeightPacket.to_bytes` (all integers little-endian)::

    header (16 bytes)
      magic        4s   b'ARWQ'
      format       u16  FORMAT_VERSION (1)
      flags        u16  0 (reserved)
      body_length  u32  bytes after the header
      crc32        u32  zlib.crc32 of the body
    body
      version i64 | base_version i64 (-1: full packet) | n_tensors u16 | n_extras u16
      n_tensors x tensor:
        name_len u16 | name utf-8 | encoding u8 | ndim u8 | dims u32 x ndim
        n_scales u32 | scales f32 x n_scales | zero_points u8 x n_scales
        payload_len u32 | payload
      n_extras x extra:
        name_len u16 | name utf-8 | ndim u8 | dims u32 x ndim | values f32 x prod(dims)

``n_scales`` is 0 for float32 tensors, 1 for per-tensor and ``dims[0]`` for per-channel
quantization. The CRC covers the whole body (versions, names, shapes, encodings, scales,
zero points, payloads, extras); a ROS message carrying the same fields gets the same CRC
from :meth:`WeightPacket.compute_crc`. Since the header is checked field by field and the
body by the CRC, every single-bit error of a serialized packet is detected.
"""

from __future__ import annotations

import dataclasses
import math
import struct
from typing import Any
import zlib

from async_rl_ros.core.weights.quantize import dequantize, dequantize_wide, from_planes
import numpy as np

__all__ = [
    'CodecError',
    'REJECT_REASONS',
    'ENCODING_FP32',
    'ENCODING_INT8',
    'ENCODING_INT8_ZLIB',
    'ENCODING_INT16',
    'ENCODING_INT16_ZLIB',
    'ENCODING_NAMES',
    'MAGIC',
    'FORMAT_VERSION',
    'HEADER_SIZE',
    'QuantizedTensor',
    'WeightPacket',
]


# ====================================================================== constants
ENCODING_FP32 = 0  #: payload: little-endian float32 values, row-major
ENCODING_INT8 = 1  #: payload: uint8 affine codes, row-major
ENCODING_INT8_ZLIB = 2  #: payload: zlib stream of the uint8 codes
ENCODING_INT16 = 3  #: payload: int16 symmetric codes as two byte planes (low, then high)
ENCODING_INT16_ZLIB = 4  #: payload: zlib stream of those two planes
ENCODING_NAMES = {ENCODING_FP32: 'fp32', ENCODING_INT8: 'int8', ENCODING_INT8_ZLIB: 'int8+zlib',
                  ENCODING_INT16: 'int16', ENCODING_INT16_ZLIB: 'int16+zlib'}
_WIDE = (ENCODING_INT16, ENCODING_INT16_ZLIB)
_ZLIB = (ENCODING_INT8_ZLIB, ENCODING_INT16_ZLIB)

MAGIC = b'ARWQ'
FORMAT_VERSION = 1
_HEADER = struct.Struct('<4sHHII')
HEADER_SIZE = _HEADER.size  # bytes
_BODY_HEAD = struct.Struct('<qqHH')
_MAX_ELEMENTS = 2**31 - 1  # largest tensor accepted from the wire (elements)

#: Reasons a packet is rejected for (keys of :attr:`WeightDecoder.rejected`).
REJECT_REASONS = ('truncated', 'format', 'crc', 'version', 'base_version', 'shape', 'encoding',
                  'non_finite', 'extras', 'bounds', 'layout', 'shard', 'run_id')


class CodecError(ValueError):
    """
    A packet is rejected; :attr:`reason` says why (one of :data:`REJECT_REASONS`).

    :param reason: short machine-readable cause, e.g. ``'crc'``.
    :param detail: human-readable explanation.
    """

    def __init__(self, reason: str, detail: str = ''):
        self.reason = reason
        self.detail = detail
        super().__init__(f'{reason}: {detail}' if detail else reason)


# ====================================================================== data model
@dataclasses.dataclass
class QuantizedTensor:
    """
    One tensor of a packet, in the fields the ``QuantizedTensor`` ROS message carries.

    :param name: state-dict key, e.g. ``trunk.0.weight``.
    :param shape: tensor shape.
    :param encoding: one of the ``ENCODING_*`` constants.
    :param scales: float32 step per row (empty for float32).
    :param zero_points: uint8 zero point per row (same length as ``scales``; 0 for int16).
    :param payload: the encoded values (see the encoding constants).
    """

    name: str
    shape: tuple[int, ...]
    encoding: int
    scales: np.ndarray
    zero_points: np.ndarray
    payload: bytes

    def __post_init__(self):
        self.shape = tuple(int(d) for d in self.shape)
        self.scales = np.asarray(self.scales, dtype=np.float32).reshape(-1)
        self.zero_points = np.asarray(self.zero_points, dtype=np.uint8).reshape(-1)
        self.payload = bytes(self.payload)

    @property
    def numel(self) -> int:
        """Return the number of elements of the tensor."""
        return math.prod(self.shape)

    def values(self) -> np.ndarray:
        """
        Decode the payload to float32; a delta packet yields the delta itself.

        :returns: float32 array of :attr:`shape`.
        :raises CodecError: ``'shape'`` if the payload or scales do not fit the shape,
            ``'encoding'`` for an unknown encoding, bad scales or a bad zlib stream.
        """
        n = self.numel
        if n > _MAX_ELEMENTS:
            raise CodecError('shape', f'{self.name}: {n} elements is too many')
        if self.encoding == ENCODING_FP32:
            if len(self.scales) or len(self.zero_points):
                raise CodecError('encoding', f'{self.name}: float32 tensor with scales')
            if len(self.payload) != 4 * n:
                raise CodecError('shape', f'{self.name}: {len(self.payload)} payload bytes for '
                                 f'{n} float32 values')
            return np.frombuffer(self.payload, dtype='<f4').astype(np.float32).reshape(
                self.shape)
        if self.encoding not in (ENCODING_INT8, ENCODING_INT8_ZLIB) + _WIDE:
            raise CodecError('encoding', f'{self.name}: unknown encoding {self.encoding}')
        rows = self.shape[0] if self.shape else 1
        if len(self.scales) not in (1, rows) or len(self.zero_points) != len(self.scales):
            raise CodecError('shape', f'{self.name}: {len(self.scales)} scales and '
                             f'{len(self.zero_points)} zero points for shape {self.shape}')
        if not (np.isfinite(self.scales).all() and (self.scales >= 0).all()):
            raise CodecError('encoding', f'{self.name}: scales must be finite and >= 0')
        wide = self.encoding in _WIDE
        size = 2 * n if wide else n
        payload = self.payload
        if self.encoding in _ZLIB:
            payload = _inflate(payload, size, self.name)
        if len(payload) != size:
            raise CodecError('shape', f'{self.name}: {len(payload)} payload bytes for shape '
                             f'{self.shape}')
        if wide:
            if self.zero_points.any():
                raise CodecError('encoding', f'{self.name}: int16 codes with zero points')
            return dequantize_wide(from_planes(payload, n).reshape(self.shape), self.scales)
        codes = np.frombuffer(payload, dtype=np.uint8).reshape(self.shape)
        return dequantize(codes, self.scales, self.zero_points)


def _inflate(payload: bytes, size: int, name: str) -> bytes:
    """Decompress a zlib stream that must hold exactly ``size`` bytes (no bomb, no tail)."""
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(payload, size + 1)
    except zlib.error as exc:
        raise CodecError('encoding', f'{name}: bad zlib stream ({exc})') from None
    if not inflater.eof or inflater.unused_data or len(out) != size:
        raise CodecError('encoding', f'{name}: zlib stream does not hold {size} codes')
    return out


@dataclasses.dataclass
class WeightPacket:
    """
    One commit of the weights, in the fields the ``PolicyWeights`` ROS message carries.

    :param version: policy version; strictly increasing from packet to packet.
    :param base_version: version a delta packet applies to; -1 for a full packet.
    :param tensors: the encoded tensors.
    :param extras: float32 side data sent as is (``obs_mean``, ``obs_std``, ``obs_clip``).
    :param crc32: CRC32 of the body (:meth:`compute_crc`); set by :meth:`seal`.

    A transport that sends fields around the packet (a shard's id and layout) passes them as
    ``context``: the CRC then covers ``context + body``.
    """

    version: int
    base_version: int
    tensors: list[QuantizedTensor]
    extras: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    crc32: int = 0

    def __post_init__(self):
        self.extras = {str(k): np.asarray(v, dtype=np.float32) for k, v in self.extras.items()}

    @property
    def is_delta(self) -> bool:
        """Return whether the tensors are differences from ``base_version``."""
        return self.base_version >= 0

    def compute_crc(self, context: bytes = b'') -> int:
        """
        Compute the CRC32 of the packet body, preceded by ``context``.

        :param context: bytes the transport sends around the packet (empty: none).
        :returns: ``zlib.crc32`` of ``context`` and the body bytes of :meth:`to_bytes`, which
            cover versions, names, shapes, encodings, scales, zero points, payloads and extras.
        """
        return zlib.crc32(self._body(), zlib.crc32(context))

    def seal(self, context: bytes = b'') -> 'WeightPacket':
        """
        Store the CRC of the current content.

        :param context: bytes the transport sends around the packet.
        :returns: the packet itself.
        """
        self.crc32 = self.compute_crc(context)
        return self

    def to_bytes(self) -> bytes:
        """
        Serialize to the layout of the module docstring, with the stored :attr:`crc32`.

        :returns: header and body.
        """
        body = self._body()
        return _HEADER.pack(MAGIC, FORMAT_VERSION, 0, len(body), self.crc32 & 0xFFFFFFFF) + body

    def _body(self) -> bytes:
        if len(self.tensors) > 0xFFFF or len(self.extras) > 0xFFFF:
            raise ValueError('at most 65535 tensors and 65535 extras per packet')
        parts = [_BODY_HEAD.pack(self.version, self.base_version, len(self.tensors),
                                 len(self.extras))]
        for t in self.tensors:
            if len(t.scales) != len(t.zero_points):
                raise ValueError(f'{t.name}: {len(t.scales)} scales but '
                                 f'{len(t.zero_points)} zero points')
            parts += [_name(t.name), struct.pack('<B', t.encoding), _dims(t.shape),
                      struct.pack('<I', len(t.scales)), t.scales.astype('<f4').tobytes(),
                      t.zero_points.tobytes(), struct.pack('<I', len(t.payload)), t.payload]
        for key, value in self.extras.items():
            parts += [_name(key), _dims(value.shape), value.astype('<f4').tobytes()]
        return b''.join(parts)

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview, verify_crc: bool = True
                   ) -> 'WeightPacket':
        """
        Parse bytes written by :meth:`to_bytes`.

        :param data: one serialized packet, nothing before or after it.
        :param verify_crc: check the body against the header's CRC32.
        :returns: the packet (its :attr:`crc32` is the one read).
        :raises CodecError: ``'truncated'`` (fewer bytes than announced), ``'format'`` (bad
            magic, format version, flags, trailing bytes or inconsistent body) or ``'crc'``.
        """
        data = bytes(data)
        if len(data) < HEADER_SIZE:
            raise CodecError('truncated', f'{len(data)} bytes, the header alone is '
                             f'{HEADER_SIZE}')
        magic, fmt, flags, length, crc = _HEADER.unpack_from(data, 0)
        if magic != MAGIC:
            raise CodecError('format', f'bad magic {magic!r}')
        if fmt != FORMAT_VERSION or flags != 0:
            raise CodecError('format', f'unsupported format {fmt} / flags {flags:#x}')
        if len(data) - HEADER_SIZE < length:
            raise CodecError('truncated', f'{len(data) - HEADER_SIZE} body bytes of {length}')
        if len(data) - HEADER_SIZE > length:
            raise CodecError('format', f'{len(data) - HEADER_SIZE - length} trailing bytes')
        body = data[HEADER_SIZE:]
        if verify_crc and zlib.crc32(body) != crc:
            raise CodecError('crc', f'crc32 {zlib.crc32(body):#010x} != {crc:#010x}')
        reader = _Reader(body)
        version, base_version, n_tensors, n_extras = reader.unpack(_BODY_HEAD)
        tensors = []
        for _ in range(n_tensors):
            name = reader.name()
            encoding, = reader.unpack(_U8)
            shape = reader.dims()
            n_scales, = reader.unpack(_U32)
            scales = reader.array(n_scales, '<f4')
            zero_points = reader.array(n_scales, np.uint8)
            size, = reader.unpack(_U32)
            tensors.append(QuantizedTensor(name, shape, encoding, scales, zero_points,
                                           reader.take(size)))
        extras = {}
        for _ in range(n_extras):
            name = reader.name()
            shape = reader.dims()
            extras[name] = reader.array(math.prod(shape), '<f4').reshape(shape)
        if reader.left():
            raise CodecError('format', f'{reader.left()} unparsed body bytes')
        if len(extras) != n_extras:
            raise CodecError('format', 'duplicate extra names')
        return cls(version, base_version, tensors, extras, crc)


_U8 = struct.Struct('<B')
_U16 = struct.Struct('<H')
_U32 = struct.Struct('<I')


def _name(name: str) -> bytes:
    raw = name.encode('utf-8')
    if len(raw) > 0xFFFF:
        raise ValueError(f'name too long: {name[:40]}...')
    return _U16.pack(len(raw)) + raw


def _dims(shape: tuple[int, ...]) -> bytes:
    if len(shape) > 0xFF or any(not 0 <= d <= 0xFFFFFFFF for d in shape):
        raise ValueError(f'shape {shape} does not fit the layout')
    return _U8.pack(len(shape)) + np.asarray(shape, dtype='<u4').tobytes()


class _Reader:
    """Cursor over a packet body; running past its end means the lengths are inconsistent."""

    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def left(self) -> int:
        return len(self.data) - self.pos

    def take(self, n: int) -> bytes:
        if n > self.left():
            raise CodecError('format', f'field of {n} bytes runs past the body end')
        self.pos += n
        return self.data[self.pos - n:self.pos]

    def unpack(self, fmt: struct.Struct) -> tuple:
        return fmt.unpack(self.take(fmt.size))

    def array(self, count: int, dtype: Any) -> np.ndarray:
        dtype = np.dtype(dtype)
        return np.frombuffer(self.take(count * dtype.itemsize), dtype=dtype).astype(
            dtype.newbyteorder('='))

    def name(self) -> str:
        size, = self.unpack(_U16)
        try:
            return self.take(size).decode('utf-8')
        except UnicodeDecodeError:
            raise CodecError('format', 'name is not UTF-8') from None

    def dims(self) -> tuple[int, ...]:
        ndim, = self.unpack(_U8)
        return tuple(int(d) for d in self.array(ndim, '<u4'))
