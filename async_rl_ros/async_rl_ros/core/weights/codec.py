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
Weight codec: quantized keyframes, int8 deltas on them, zlib and a CRC32 per packet.

The learner's :class:`WeightEncoder` (here) turns float32 tensors into a :class:`WeightPacket`;
each worker's :class:`WeightDecoder` (:mod:`async_rl_ros.core.weights.decoder`, re-exported
here) turns packets back into float32 tensors and rejects bad ones.

Quantization is in :mod:`async_rl_ros.core.weights.quantize` and the byte format in
:mod:`async_rl_ros.core.weights.packet` (both re-exported here): per-row affine int8 or
symmetric int16, every element within half a step of its value.

Deltas on the last keyframe. A full packet is a keyframe; until the next one, every packet is
a delta from it (``base_version`` = the keyframe's version), not from the previous packet. A
receiver holding the keyframe can apply any later delta, whichever packets it missed, which is
what latest-value channels (a shared-memory board, a depth-1 topic) need. The encoder keeps
:attr:`WeightEncoder.keyframe`, bit for bit what every receiver reconstructs from the keyframe
(the same numpy operations run on both sides); a delta packet quantizes ``target -
keyframe``, so each packet carries its own rounding and errors never accumulate.

Precision. A keyframe carries ``keyframe_bits`` per weight (int8 affine codes at 8, else
symmetric int16 codes: 12 by default). A delta row's step is the step a full int8 packet of
the target row would use divided by ``delta_refine`` (8), or the delta's own range over 254
steps when that is wider (a row that moved far since the keyframe); the drift since the
keyframe becomes small codes around the zero code that zlib packs into a few bits per weight.
The defaults are the smallest packets that keep a trained reach policy's actions within 1e-2
of the learner's (``bench/compression.py``).

Packets also carry float32 ``extras`` sent as they are (normalizer statistics); a decoder
refuses statistics a policy would act with NaN on before it accepts anything.
"""

from __future__ import annotations

from typing import Any, Mapping
import zlib

from async_rl_ros.core.config import CodecConfig
from async_rl_ros.core.records import PolicyState
from async_rl_ros.core.weights.decoder import WeightDecoder
from async_rl_ros.core.weights.packet import (CodecError, ENCODING_FP32, ENCODING_INT16,
                                              ENCODING_INT16_ZLIB, ENCODING_INT8,
                                              ENCODING_INT8_ZLIB, ENCODING_NAMES,
                                              FORMAT_VERSION, HEADER_SIZE, MAGIC,
                                              QuantizedTensor, REJECT_REASONS, WeightPacket)
from async_rl_ros.core.weights.quantize import (dequantize, dequantize_wide, quantize,
                                                quantize_wide, row_steps, wide_planes)
import numpy as np
import torch

__all__ = [
    'CodecConfig',
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
    'WeightEncoder',
    'WeightDecoder',
    'quantize',
    'dequantize',
    'encode_policy_state',
]


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
            if reference is None and cfg.keyframe_bits > 8:
                wide, scales = quantize_wide(value, cfg.keyframe_bits, cfg.per_channel)
                zero_points = np.zeros(len(scales), np.uint8)
                payload, encoding, packed_encoding = (wide_planes(wide), ENCODING_INT16,
                                                      ENCODING_INT16_ZLIB)
                decoded = dequantize_wide(wide, scales)
            else:
                min_step = None
                if reference is not None:
                    min_step = row_steps(target, cfg.per_channel) / cfg.delta_refine
                codes, scales, zero_points = quantize(value, cfg.per_channel, min_step)
                payload, encoding, packed_encoding = (codes.tobytes(), ENCODING_INT8,
                                                      ENCODING_INT8_ZLIB)
                decoded = dequantize(codes, scales, zero_points)
            if cfg.entropy_coding == 'zlib':
                packed = zlib.compress(payload, cfg.zlib_level)
                if len(packed) < len(payload):
                    payload, encoding = packed, packed_encoding
            qt = QuantizedTensor(name, target.shape, encoding, scales, zero_points, payload)
        return qt, decoded if reference is None else reference + decoded


# ====================================================================== policy state
def encode_policy_state(encoder: WeightEncoder, state: PolicyState) -> WeightPacket:
    """
    Encode a learner's policy state with :meth:`WeightEncoder.encode`.

    :param encoder: the learner's encoder.
    :param state: the policy state to send.
    :returns: the sealed packet.
    """
    return encoder.encode(state.tensors(), state.version, state.extras())
