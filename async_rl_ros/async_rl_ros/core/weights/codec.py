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
Weight codec: int8 affine quantization, deltas on keyframes, zlib and a CRC32 per packet.

The learner's :class:`WeightEncoder` turns float32 tensors into a :class:`WeightPacket`; each
worker's :class:`WeightDecoder` turns packets back into float32 tensors and rejects bad ones.

Quantization (affine, unsigned 8 bit). Each tensor is cut into rows: one row per output
channel (first axis) for tensors of two or more dimensions when ``per_channel`` is on, else
one row for the whole tensor. A row ``x`` gets a float32 ``scale`` and a ``zero_point`` in
[0, 255] from its range widened to contain 0, ``[lo, hi] = [min(x, 0), max(x, 0)]``::

    scale = (hi - lo) / 254        code = rint(x / scale) + zero_point    (0..255)
    zero_point = rint(-lo / scale)     x_hat = (code - zero_point) * scale

so 0 is exact and every element is within ``scale / 2`` of ``x``. The range spans 254 steps,
not 255, so that the rounded zero point can never push the top code past 255. A row that
is all zeros gets ``scale = 0`` and decodes to exact zeros.

Deltas on the last keyframe. A full packet is a keyframe; until the next one, every packet is
a delta from it (``base_version`` = the keyframe's version), not from the previous packet. A
receiver holding the keyframe can apply any later delta, whichever packets it missed, which is
what latest-value channels (a shared-memory board, a depth-1 topic) need. The encoder keeps
:attr:`WeightEncoder.keyframe`, bit for bit what every receiver reconstructs from the keyframe
(the same numpy operations run on both sides); a delta packet quantizes ``target -
keyframe``, so each packet carries its own rounding and errors never accumulate. With
``delta_grid = 'weight'`` (default) a delta row's step is at least the step a full int8 packet
of the target row would use: the error is never larger than a full packet's, and the small
drift since the keyframe becomes runs of a few codes around the zero code that zlib shrinks to
a fraction of a byte per weight.

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

import collections
import dataclasses
import math
import struct
from typing import Any, Iterable, Mapping
import zlib

from async_rl_ros.core.config import CodecConfig
from async_rl_ros.core.records import PolicyState, PolicyStateError
import numpy as np
import torch

__all__ = [
    'CodecConfig',
    'CodecError',
    'REJECT_REASONS',
    'ENCODING_FP32',
    'ENCODING_INT8',
    'ENCODING_INT8_ZLIB',
    'ENCODING_NAMES',
    'MAGIC',
    'FORMAT_VERSION',
    'HEADER_SIZE',
    'QuantizedTensor',
    'WeightPacket',
    'WeightEncoder',
    'WeightDecoder',
    'quantize',
    'dequantize',
    'encode_policy_state',
]


# ====================================================================== constants
ENCODING_FP32 = 0  #: payload: little-endian float32 values, row-major
ENCODING_INT8 = 1  #: payload: uint8 affine codes, row-major
ENCODING_INT8_ZLIB = 2  #: payload: zlib stream of the uint8 codes
ENCODING_NAMES = {ENCODING_FP32: 'fp32', ENCODING_INT8: 'int8', ENCODING_INT8_ZLIB: 'int8+zlib'}

MAGIC = b'ARWQ'
FORMAT_VERSION = 1
_HEADER = struct.Struct('<4sHHII')
HEADER_SIZE = _HEADER.size  # bytes
_BODY_HEAD = struct.Struct('<qqHH')
_STEPS = 254  # quantization steps spanned by a row's range (codes 0..255, see module doc)
_MAX_ELEMENTS = 2**31 - 1  # largest tensor accepted from the wire (elements)

#: Reasons a packet is rejected for (keys of :attr:`WeightDecoder.rejected`).
REJECT_REASONS = ('truncated', 'format', 'crc', 'version', 'base_version', 'shape', 'encoding',
                  'non_finite', 'extras')


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


# ====================================================================== quantization
def _rows(x: np.ndarray, per_channel: bool) -> np.ndarray:
    """View ``x`` as ``(rows, elements per row)``: one row per output channel or one row."""
    if per_channel and x.ndim >= 2:
        return x.reshape(x.shape[0], math.prod(x.shape[1:]))
    return x.reshape(1, x.size)


def _steps(rows: np.ndarray) -> np.ndarray:
    """Return the float64 step of each row: its range widened to contain 0, over 254."""
    lo = rows.min(axis=1, initial=0.0).astype(np.float64)
    hi = rows.max(axis=1, initial=0.0).astype(np.float64)
    return (hi - lo) / _STEPS


def quantize(x: np.ndarray, per_channel: bool = True, min_step: np.ndarray | None = None
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """
    Quantize a float array to affine uint8 codes, one scale per row.

    :param x: finite float array of any shape.
    :param per_channel: one row per entry of the first axis when ``x.ndim >= 2``.
    :param min_step: optional lower bound of each row's step (shape ``(rows,)``).
    :returns: ``(codes, scales, zero_points)``: uint8 codes of ``x``'s shape, float32 scales
        and uint8 zero points of shape ``(rows,)``. Every element decodes to within
        ``scale / 2`` of its value (up to float32 rounding).
    """
    rows = _rows(np.asarray(x, dtype=np.float32), per_channel)
    lo = rows.min(axis=1, initial=0.0).astype(np.float64)
    step = _steps(rows)
    if min_step is not None:
        step = np.maximum(step, np.asarray(min_step, dtype=np.float64))
    scales = step.astype(np.float32)
    safe = np.where(scales > 0, scales, 1.0).astype(np.float64)
    zero_points = np.clip(np.rint(-lo / safe), 0, 255)
    codes = np.rint(rows / safe[:, None]) + zero_points[:, None]
    codes = np.clip(codes, 0, 255).astype(np.uint8)
    return codes.reshape(np.shape(x)), scales, zero_points.astype(np.uint8)


def dequantize(codes: np.ndarray, scales: np.ndarray, zero_points: np.ndarray) -> np.ndarray:
    """
    Map uint8 codes back to float32: ``(code - zero_point) * scale`` row by row.

    :param codes: uint8 codes; their size must be a multiple of ``len(scales)``.
    :param scales: float32 scale per row.
    :param zero_points: uint8 zero point per row.
    :returns: float32 array of the shape of ``codes``.
    """
    scales = np.asarray(scales, dtype=np.float32)
    n = len(scales)
    rows = codes.reshape(n, codes.size // n if n else 0).astype(np.float32)
    rows -= np.asarray(zero_points, dtype=np.float32)[:, None]
    with np.errstate(over='ignore'):  # a crafted scale may overflow; the decoder checks
        rows *= scales[:, None]
    return rows.reshape(codes.shape)


# ====================================================================== data model
@dataclasses.dataclass
class QuantizedTensor:
    """
    One tensor of a packet, in the fields the ``QuantizedTensor`` ROS message carries.

    :param name: state-dict key, e.g. ``trunk.0.weight``.
    :param shape: tensor shape.
    :param encoding: ``ENCODING_FP32``, ``ENCODING_INT8`` or ``ENCODING_INT8_ZLIB``.
    :param scales: float32 step per row (empty for float32).
    :param zero_points: uint8 zero point per row (same length as ``scales``).
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
        if self.encoding not in (ENCODING_INT8, ENCODING_INT8_ZLIB):
            raise CodecError('encoding', f'{self.name}: unknown encoding {self.encoding}')
        rows = self.shape[0] if self.shape else 1
        if len(self.scales) not in (1, rows) or len(self.zero_points) != len(self.scales):
            raise CodecError('shape', f'{self.name}: {len(self.scales)} scales and '
                             f'{len(self.zero_points)} zero points for shape {self.shape}')
        if not (np.isfinite(self.scales).all() and (self.scales >= 0).all()):
            raise CodecError('encoding', f'{self.name}: scales must be finite and >= 0')
        payload = self.payload
        if self.encoding == ENCODING_INT8_ZLIB:
            payload = _inflate(payload, n, self.name)
        if len(payload) != n:
            raise CodecError('shape', f'{self.name}: {len(payload)} codes for shape '
                             f'{self.shape}')
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


# ====================================================================== encoder
def _as_float32(tensors: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Convert numpy arrays or torch tensors to float32 numpy arrays; refuse non-finite."""
    out = {}
    for name, value in tensors.items():
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu().numpy()
        array = np.array(value, dtype=np.float32)
        if not np.isfinite(array).all():
            raise ValueError(f'{name}: non-finite values cannot be encoded')
        out[str(name)] = array
    return out


class WeightEncoder:
    """
    Learner side: encode successive versions of the weights into packets.

    :param cfg: codec settings (defaults: per-channel int8, zlib, deltas, full every 50).

    :attr:`keyframe` holds exactly what a receiver reconstructs from the last full packet,
    :attr:`reference` what it holds after the last packet.
    """

    def __init__(self, cfg: CodecConfig | None = None):
        self.cfg = cfg if cfg is not None else CodecConfig()
        self.cfg.validate()
        self.version = -1
        self.key_version = -1
        self.keyframe: dict[str, np.ndarray] = {}
        self.reference: dict[str, np.ndarray] = {}
        self._since_full = 0
        self._full_requested = True

    def request_full(self) -> None:
        """Make the next :meth:`encode` send a full packet (a new keyframe)."""
        self._full_requested = True

    def encode(self, tensors: Mapping[str, Any], version: int,
               extras: Mapping[str, Any] | None = None) -> WeightPacket:
        """
        Encode a commit as a full or a delta packet, as the configuration asks.

        A full packet goes out first, when ``delta`` is off, every ``full_every`` packets,
        after :meth:`request_full` and whenever the tensor names or shapes change.

        :param tensors: name -> float tensor (numpy array or torch tensor).
        :param version: policy version, greater than the last one encoded.
        :param extras: float32 side data sent as is.
        :returns: the sealed packet.
        """
        arrays = _as_float32(tensors)
        same_layout = {k: v.shape for k, v in arrays.items()} == \
            {k: v.shape for k, v in self.keyframe.items()}
        if (not self.cfg.delta or self._full_requested or self._since_full >= self.cfg.full_every
                or not same_layout):
            return self.encode_full(arrays, version, extras)
        return self.encode_delta(arrays, version, extras=extras)

    def encode_full(self, tensors: Mapping[str, Any], version: int,
                    extras: Mapping[str, Any] | None = None) -> WeightPacket:
        """
        Encode every tensor on its own: a new keyframe.

        :param tensors: name -> float tensor (numpy array or torch tensor).
        :param version: policy version, greater than the last one encoded.
        :param extras: float32 side data sent as is.
        :returns: the sealed packet (``base_version = -1``).
        """
        arrays = _as_float32(tensors)
        self._check_version(version)
        encoded = [self._encode_tensor(name, x, None) for name, x in arrays.items()]
        packet = self._commit(version, -1, encoded, extras)
        self.keyframe, self.key_version = self.reference, int(version)
        self._since_full = 1
        self._full_requested = False
        return packet

    def encode_delta(self, tensors: Mapping[str, Any], version: int,
                     base_version: int | None = None,
                     extras: Mapping[str, Any] | None = None) -> WeightPacket:
        """
        Encode the difference from :attr:`keyframe`.

        :param tensors: name -> float tensor with the names and shapes of the keyframe.
        :param version: policy version, greater than the last one encoded.
        :param base_version: the version the delta applies to; must be the keyframe's
            (default).
        :param extras: float32 side data sent as is.
        :returns: the sealed packet.
        :raises ValueError: no keyframe was encoded yet, the base is not the keyframe or the
            tensors do not match it.
        """
        arrays = _as_float32(tensors)
        if self.key_version < 0:
            raise ValueError('a delta needs a keyframe: call encode_full first')
        base = self.key_version if base_version is None else int(base_version)
        if base != self.key_version:
            raise ValueError(f'base_version {base} is not the keyframe version '
                             f'{self.key_version}')
        layout = {k: v.shape for k, v in arrays.items()}
        if layout != {k: v.shape for k, v in self.keyframe.items()}:
            raise ValueError(f'tensors {layout} do not match the keyframe; send a full packet')
        self._check_version(version)
        encoded = [self._encode_tensor(name, x, self.keyframe[name])
                   for name, x in arrays.items()]
        packet = self._commit(version, base, encoded, extras)
        self._since_full += 1
        return packet

    def _check_version(self, version: int) -> None:
        if int(version) <= self.version:
            raise ValueError(f'version {version} is not greater than {self.version}')

    def _commit(self, version: int, base: int,
                encoded: list[tuple[QuantizedTensor, np.ndarray]],
                extras: Mapping[str, Any] | None) -> WeightPacket:
        packet = WeightPacket(int(version), base, [qt for qt, _ in encoded],
                              dict(extras or {})).seal()
        # Only a packet that could be built moves the state.
        self.reference = {qt.name: ref for qt, ref in encoded}
        self.version = int(version)
        return packet

    def _encode_tensor(self, name: str, target: np.ndarray, reference: np.ndarray | None
                       ) -> tuple[QuantizedTensor, np.ndarray]:
        """Return the encoded tensor and what the receiver will hold after decoding it."""
        cfg = self.cfg
        value = target if reference is None else target - reference
        if not cfg.quantize:
            qt = QuantizedTensor(name, target.shape, ENCODING_FP32, np.zeros(0, np.float32),
                                 np.zeros(0, np.uint8), value.astype('<f4').tobytes())
            decoded = value
        else:
            min_step = None
            if reference is not None and cfg.delta_grid == 'weight':
                min_step = _steps(_rows(target, cfg.per_channel))
            codes, scales, zero_points = quantize(value, cfg.per_channel, min_step)
            payload, encoding = codes.tobytes(), ENCODING_INT8
            if cfg.entropy_coding == 'zlib':
                packed = zlib.compress(payload, cfg.zlib_level)
                if len(packed) < len(payload):
                    payload, encoding = packed, ENCODING_INT8_ZLIB
            qt = QuantizedTensor(name, target.shape, encoding, scales, zero_points, payload)
            decoded = dequantize(codes, scales, zero_points)
        return qt, decoded if reference is None else reference + decoded


# ====================================================================== decoder
class WeightDecoder:
    """
    Worker side: rebuild float32 tensors from packets and reject bad packets.

    A rejected packet raises :class:`CodecError`, is counted in :attr:`rejected` by reason
    and leaves the state untouched, so the caller keeps acting with its last good policy.
    The decoder keeps the last keyframe (full packet) that deltas apply to.
    """

    def __init__(self):
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


# ====================================================================== policy state
def encode_policy_state(encoder: WeightEncoder, state: PolicyState) -> WeightPacket:
    """
    Encode a learner's policy state with :meth:`WeightEncoder.encode`.

    :param encoder: the learner's encoder.
    :param state: the policy state to send.
    :returns: the sealed packet.
    """
    return encoder.encode(state.tensors(), state.version, state.extras())
