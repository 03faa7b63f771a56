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
What a worker expects of a weight packet, and the checks of a packet against it.

A CRC only catches line noise: a packet with a valid CRC can still declare a layout of
10^12 floats, shard 7 of 2, version 2^62 or ``obs_std`` of 1e-30. A worker is told at
construction what its own policy is (:class:`Expectation`: the actor's tensor names, shapes
and dtype, the observation width, the shard count, the bounds of sane values), and its
:class:`~async_rl_ros.core.weights.assembler.ShardAssembler` checks every packet
against it with the functions below *before* it allocates or changes anything:

* :func:`check_fields`: the shard id and count are in range, the layout is the expected one
  (or one the worker was told to accept; without one, the first layout accepted is pinned
  and every layout is bounded in size), the chunk size and the partition count are bounded;
  all by arithmetic on the declared fields, nothing is allocated.
* :func:`check_versions`: versions are non-negative and below :attr:`Expectation.max_version`;
  within a run they move forward at most :attr:`Expectation.max_version_ahead` past the
  newest keyframe held; a packet of another run (its ``run_id``) is taken only as a full
  keyframe, and a run once replaced is never taken back.
* :func:`check_tensors`: every tensor is a partition of the layout, in the shape it travels
  in, with a known encoding and a payload and scales no larger than that shape needs.
* :func:`check_extras`: the extras are exactly ``obs_mean``, ``obs_std`` and ``obs_clip``
  of the expected width, finite and within bounds (``obs_std`` above a floor).

Decoded weights are bounded by :attr:`Expectation.max_abs_weight` in the decoder. Each check
raises :class:`~async_rl_ros.core.weights.packet.CodecError` with the reason it is counted
under.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Sequence

from async_rl_ros.core.weights.packet import (CodecError, ENCODING_FP32, ENCODING_INT16,
                                              ENCODING_INT16_ZLIB, ENCODING_INT8,
                                              ENCODING_INT8_ZLIB, WeightPacket)
from async_rl_ros.core.weights.parameter_server import Partition
import numpy as np

__all__ = ['Expectation', 'Layout', 'check_fields', 'check_versions', 'check_tensors',
           'check_extras', 'EXTRAS']

Layout = Mapping[str, tuple[int, ...]]

#: The extras every packet carries: the normalizer statistics a policy acts with.
EXTRAS = ('obs_mean', 'obs_std', 'obs_clip')

# bytes per element of each encoding's raw payload (before zlib)
_RAW = {ENCODING_FP32: 4, ENCODING_INT8: 1, ENCODING_INT8_ZLIB: 1, ENCODING_INT16: 2,
        ENCODING_INT16_ZLIB: 2}
_ZLIB_SLACK = 64  # bytes a zlib stream may exceed its raw payload by (never sent, but legal)


def _layout(shapes: Mapping[str, Sequence[int]]) -> dict[str, tuple[int, ...]]:
    return {str(k): tuple(int(d) for d in v) for k, v in shapes.items()}


@dataclasses.dataclass(frozen=True)
class Expectation:
    """
    What a worker takes from the wire: its own policy's layout and the bounds of sane values.

    :param layout: the actor's tensors ``{name: shape}``; ``None``: the first layout accepted
        is pinned (and every layout is bounded by :attr:`max_elements`).
    :param obs_dim: observation width of ``obs_mean`` / ``obs_std`` (``None``: not checked).
    :param num_shards: shards in the cluster (``None``: any count up to 65535).
    :param also: other layouts the worker was told to accept (a new run may bring one).
    :param dtype: the dtype of every tensor of the actor (the wire carries float32).
    :param max_abs_weight: largest magnitude of a decoded weight.
    :param std_floor: smallest ``obs_std`` (the normalizer divides by it).
    :param max_abs_stat: largest magnitude of ``obs_mean`` and ``obs_std``.
    :param max_clip: largest ``obs_clip``.
    :param max_version: versions are below this.
    :param max_version_ahead: within a run, how far past the newest keyframe held a version
        may be.
    :param max_elements: floats a layout may hold when :attr:`layout` is ``None``.
    :param max_partitions: partitions a layout may be cut into.
    """

    layout: Layout | None = None
    obs_dim: int | None = None
    num_shards: int | None = None
    also: tuple[Layout, ...] = ()
    dtype: str = 'float32'
    max_abs_weight: float = 1e6
    std_floor: float = 1e-6
    max_abs_stat: float = 1e9
    max_clip: float = 1e4
    max_version: int = 2 ** 48
    max_version_ahead: int = 100_000
    max_elements: int = 2 ** 26
    max_partitions: int = 2 ** 16

    def __post_init__(self):
        if self.layout is not None:
            object.__setattr__(self, 'layout', _layout(self.layout))
        object.__setattr__(self, 'also', tuple(_layout(x) for x in self.also))
        if self.dtype != 'float32':
            raise ValueError(f'the wire carries float32 tensors, not {self.dtype}')

    @classmethod
    def of_tensors(cls, tensors: Mapping[str, Any], obs_dim: int | None = None,
                   **bounds: Any) -> 'Expectation':
        """
        Expect the names, shapes and dtype of ``tensors`` (a state dict or numpy arrays).

        :param tensors: the worker's own actor tensors (torch tensors or numpy arrays).
        :param obs_dim: observation width.
        :param bounds: other fields of :class:`Expectation`.
        :raises ValueError: a tensor is not float32.
        """
        layout = {}
        for name, value in tensors.items():
            dtype = str(value.dtype).replace('torch.', '')
            if dtype != 'float32':
                raise ValueError(f'{name}: dtype {dtype}, the wire carries float32')
            layout[str(name)] = tuple(int(d) for d in value.shape)
        return cls(layout, obs_dim, **bounds)

    @classmethod
    def of_policy(cls, policy: Any, **bounds: Any) -> 'Expectation':
        """Expect the actor of a worker's policy (anything with ``actor.state_dict()``)."""
        actor = policy.actor
        return cls.of_tensors(actor.state_dict(), int(actor.obs_dim), **bounds)

    def layouts(self) -> list[dict[str, tuple[int, ...]]]:
        """Return the layouts accepted (empty: any bounded layout, pinned at first use)."""
        return [] if self.layout is None else [dict(self.layout), *map(dict, self.also)]


def _numel(shape: Sequence[int]) -> int:
    return math.prod(int(d) for d in shape)


def check_fields(sp: Any, expect: Expectation, pinned: Layout | None) -> None:
    """
    Check a shard packet's shard fields and layout by arithmetic only (nothing allocated).

    :param sp: the :class:`~async_rl_ros.core.weights.shard_packet.ShardPacket`.
    :param expect: what the worker expects.
    :param pinned: the layout held, which a worker without :attr:`Expectation.layout` keeps.
    :raises CodecError: ``'shard'`` (id or count out of range), ``'layout'`` (not a layout
        the worker takes, too big, or cut into too many partitions).
    """
    if not 1 <= sp.num_shards <= 0xFFFF or not 0 <= sp.shard_id < sp.num_shards:
        raise CodecError('shard', f'shard {sp.shard_id} of {sp.num_shards}')
    if expect.num_shards is not None and sp.num_shards != expect.num_shards:
        raise CodecError('shard', f'{sp.num_shards} shards, this worker reads '
                         f'{expect.num_shards}')
    accepted = expect.layouts()
    if accepted:
        if not any(sp.layout == layout for layout in accepted):
            raise CodecError('layout', "not the layout of this worker's policy")
    elif pinned and sp.layout != pinned:
        raise CodecError('layout', 'not the layout pinned by the first packet')
    total = 0
    for name, shape in sp.layout.items():
        if not name or len(shape) > 8 or any(d < 0 for d in shape):
            raise CodecError('layout', f'tensor {name!r} of shape {tuple(shape)}')
        total += _numel(shape)
        if total > expect.max_elements and not accepted:
            raise CodecError('layout', f'more than {expect.max_elements} floats')
    if not 1 <= sp.chunk_size <= 0xFFFFFFFF:
        raise CodecError('layout', f'chunk size {sp.chunk_size} for {total} floats')
    parts = sum(max(1, -(-_numel(shape) // sp.chunk_size)) for shape in sp.layout.values())
    if parts > expect.max_partitions:
        raise CodecError('layout', f'{parts} partitions, at most {expect.max_partitions}')


def check_versions(packet: WeightPacket, expect: Expectation, new_run: bool,
                   newest_key: int) -> None:
    """
    Check a packet's versions before its decoder sees it.

    :param packet: the weight packet.
    :param expect: the bounds.
    :param new_run: the packet is of a run this worker holds nothing of.
    :param newest_key: the newest keyframe version the worker holds of the run (-1: none).
    :raises CodecError: ``'version'`` (negative, past :attr:`Expectation.max_version` or too
        far ahead), ``'base_version'`` (below -1 or not below the version) or ``'run_id'``
        (a delta of a new run).
    """
    version, base = packet.version, packet.base_version
    if not 0 <= version < expect.max_version:
        raise CodecError('version', f'version {version} out of [0, {expect.max_version})')
    if base < -1 or base >= version:
        raise CodecError('base_version', f'base_version {base} of version {version}')
    if new_run:
        if packet.is_delta:
            raise CodecError('run_id', 'a new run starts with a full keyframe, not a delta')
        return
    if newest_key >= 0 and version > newest_key + expect.max_version_ahead:
        raise CodecError('version', f'version {version} is more than '
                         f'{expect.max_version_ahead} past the keyframe {newest_key}')


def check_tensors(packet: WeightPacket, parts: Mapping[str, Partition], layout: Layout,
                  shape_of: Any) -> None:
    """
    Check that each tensor is a partition, in its travelling shape, with a bounded payload.

    :param packet: the weight packet.
    :param parts: the partitions of the layout by key.
    :param layout: the layout.
    :param shape_of: ``(partition, tensor shape) -> shape`` the partition travels in.
    :raises CodecError: ``'format'`` (a name twice), ``'shape'`` or ``'encoding'``.
    """
    seen = set()
    for t in packet.tensors:
        if t.name in seen:
            raise CodecError('format', f'tensor {t.name!r} twice')
        seen.add(t.name)
        part = parts.get(t.name)
        if part is None or t.shape != shape_of(part, tuple(layout[part.tensor])):
            raise CodecError('shape', f'{t.name} {t.shape} is not a partition of the layout')
        raw = _RAW.get(t.encoding)
        if raw is None:
            raise CodecError('encoding', f'{t.name}: unknown encoding {t.encoding}')
        rows = t.shape[0] if t.shape else 1
        if t.encoding != ENCODING_FP32 and len(t.scales) not in (1, rows):
            raise CodecError('shape', f'{t.name}: {len(t.scales)} scales for {rows} rows')
        if len(t.payload) > raw * part.size + _ZLIB_SLACK:
            raise CodecError('shape', f'{t.name}: {len(t.payload)} payload bytes')


def check_extras(extras: Mapping[str, np.ndarray], expect: Expectation,
                 width: int | None) -> None:
    """
    Check the extras are exactly the normalizer statistics, of the width and within bounds.

    :param extras: the packet's extras.
    :param expect: the bounds (and :attr:`Expectation.obs_dim`).
    :param width: the width held so far, when :attr:`Expectation.obs_dim` is ``None``.
    :raises CodecError: ``'extras'``.
    """
    if set(extras) != set(EXTRAS):
        raise CodecError('extras', f'extras {sorted(extras)}, expected {sorted(EXTRAS)}')
    width = expect.obs_dim if expect.obs_dim is not None else width
    mean, std, clip = (np.asarray(extras[k], np.float64) for k in EXTRAS)
    for name, value in (('obs_mean', mean), ('obs_std', std)):
        if value.ndim != 1 or (width is not None and value.shape != (width,)):
            raise CodecError('extras', f'{name} of shape {value.shape}, width {width}')
        if not (np.isfinite(value).all() and (np.abs(value) <= expect.max_abs_stat).all()):
            raise CodecError('extras', f'{name} beyond +-{expect.max_abs_stat:g}')
    if mean.shape != std.shape:
        raise CodecError('extras', f'obs_mean {mean.shape} and obs_std {std.shape}')
    if std.size and std.min() < expect.std_floor:
        raise CodecError('extras', f'obs_std {std.min():g} below {expect.std_floor:g}')
    if clip.size != 1 or not 0 < float(clip.reshape(-1)[0]) <= expect.max_clip:
        raise CodecError('extras', f'obs_clip {clip.reshape(-1)[:2]} out of '
                         f'(0, {expect.max_clip:g}]')
