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
Quantization of weight tensors: int8 affine codes and wide symmetric int16 codes.

Quantization (affine, unsigned 8 bit). Each tensor is cut into rows: one row per output
channel (first axis) for tensors of two or more dimensions when ``per_channel`` is on, else
one row for the whole tensor. A row ``x`` gets a float32 ``scale`` and a ``zero_point`` in
[0, 255] from its range widened to contain 0, ``[lo, hi] = [min(x, 0), max(x, 0)]``::

    scale = (hi - lo) / 254        code = rint(x / scale) + zero_point    (0..255)
    zero_point = rint(-lo / scale)     x_hat = (code - zero_point) * scale

so 0 is exact and every element is within ``scale / 2`` of ``x``. The range spans 254 steps,
not 255, so that the rounded zero point can never push the top code past 255. A row that
is all zeros gets ``scale = 0`` and decodes to exact zeros.

Wide quantization (symmetric, ``bits`` of 9 to 16, int16 codes), for keyframes that must be
finer than int8: ``scale = max|x| / (2**(bits - 1) - 1)``, ``code = rint(x / scale)``,
``x_hat = code * scale``, zero points all 0. The payload holds the codes as two byte planes,
low bytes then high bytes: with fewer than 16 bits the high plane is mostly sign bits, which
zlib packs into little.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ['quantize', 'dequantize', 'quantize_wide', 'dequantize_wide', 'wide_planes',
           'from_planes', 'row_steps']

_STEPS = 254  # quantization steps spanned by a row's range (codes 0..255, see module doc)


def _rows(x: np.ndarray, per_channel: bool) -> np.ndarray:
    """View ``x`` as ``(rows, elements per row)``: one row per output channel or one row."""
    if per_channel and x.ndim >= 2:
        return x.reshape(x.shape[0], math.prod(x.shape[1:]))
    return x.reshape(1, x.size)


def row_steps(x: np.ndarray, per_channel: bool) -> np.ndarray:
    """Return the float64 step a full packet quantizes each row of ``x`` with."""
    return _steps(_rows(np.asarray(x, dtype=np.float32), per_channel))


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


def quantize_wide(x: np.ndarray, bits: int, per_channel: bool = True
                  ) -> tuple[np.ndarray, np.ndarray]:
    """
    Quantize a float array to symmetric int16 codes of ``bits`` bits, one scale per row.

    :param x: finite float array of any shape.
    :param bits: 9 to 16.
    :param per_channel: one row per entry of the first axis when ``x.ndim >= 2``.
    :returns: ``(codes, scales)``: int16 codes of ``x``'s shape and float32 scales of shape
        ``(rows,)``. Every element decodes to within ``scale / 2`` of its value.
    """
    if not 9 <= bits <= 16:
        raise ValueError(f'bits must be 9..16, got {bits}')
    top = 2 ** (bits - 1) - 1
    rows = _rows(np.asarray(x, dtype=np.float32), per_channel)
    peak = np.abs(rows).max(axis=1, initial=0.0).astype(np.float64)
    scales = (peak / top).astype(np.float32)
    safe = np.where(scales > 0, scales, 1.0).astype(np.float64)
    codes = np.clip(np.rint(rows / safe[:, None]), -top, top).astype(np.int16)
    return codes.reshape(np.shape(x)), scales


def dequantize_wide(codes: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """Map int16 codes back to float32: ``code * scale`` row by row."""
    scales = np.asarray(scales, dtype=np.float32)
    n = len(scales)
    rows = codes.reshape(n, codes.size // n if n else 0).astype(np.float32)
    with np.errstate(over='ignore'):  # a crafted scale may overflow; the decoder checks
        rows *= scales[:, None]
    return rows.reshape(codes.shape)


def wide_planes(codes: np.ndarray) -> bytes:
    """Return int16 codes as two byte planes: every low byte, then every high byte."""
    return np.ascontiguousarray(codes.astype('<i2').reshape(-1, 1).view(np.uint8).T).tobytes()


def from_planes(payload: bytes, n: int) -> np.ndarray:
    """Return the ``n`` int16 codes that :func:`wide_planes` wrote."""
    planes = np.frombuffer(payload, dtype=np.uint8).reshape(2, n)
    return np.ascontiguousarray(planes.T).view('<i2').reshape(n).astype(np.int16)


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
