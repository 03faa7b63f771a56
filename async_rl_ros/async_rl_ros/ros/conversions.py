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
Core objects <-> ``async_rl_ros_interfaces`` messages, through buffer views only.

Arrays cross with ``numpy.frombuffer`` on the message's ``array.array`` fields and
``array.array(...).frombytes`` the other way: no per-element Python loop anywhere. Every
function that reads a message validates it and raises
:class:`~async_rl_ros.core.weights.codec.CodecError` (``'shape'``, ``'format'``, ``'encoding'``) on
inconsistent data, so the nodes count the rejection by reason and keep running; CRCs and
versions are checked by the core codec objects the converted packets go to.

The message classes are looked up lazily (``msgs`` defaults to
``async_rl_ros_interfaces.msg``), so this module imports without ROS; the CI tests pass
classes generated from the parsed ``.msg`` files instead.
"""

from __future__ import annotations

from array import array
import importlib
import math
from typing import Any, Mapping

from async_rl_ros.core.records import SOURCES, TRANSITION_FIELDS
from async_rl_ros.core.weights.codec import CodecError, QuantizedTensor, WeightPacket
from async_rl_ros.core.weights.sharded_weights import ShardPacket
import numpy as np

__all__ = ['TRANSITION_KEYS', 'SOURCES', 'batch_to_msg', 'msg_to_batch', 'tensor_to_msg',
           'msg_to_tensor', 'float_tensor_to_msg', 'msg_to_float_tensor',
           'shard_packet_to_msg', 'msg_to_shard_packet', 'interfaces',
           'status_to_receiver_stats']

#: Keys of a transition batch carried as message fields (``source`` travels as a string).
TRANSITION_KEYS = tuple(k for k in TRANSITION_FIELDS if k != 'source')
_MAX_DIM = 1 << 20  # widest observation / action accepted from the wire


def interfaces(msgs: Any = None) -> Any:
    """Return the message module: ``msgs`` when given, else ``async_rl_ros_interfaces.msg``."""
    return msgs if msgs is not None else importlib.import_module('async_rl_ros_interfaces.msg')


def _f32(values: Any) -> array:
    out = array('f')
    out.frombytes(np.ascontiguousarray(values, dtype=np.float32).tobytes())
    return out


def _typed(code: str, dtype: str, values: Any) -> array:
    out = array(code)
    out.frombytes(np.ascontiguousarray(values, dtype=dtype).tobytes())
    return out


def _view(field: Any, dtype: Any) -> np.ndarray:
    """Return a numpy view of an ``array.array`` (or bytes) message field."""
    return np.frombuffer(memoryview(field).cast('B'), dtype=dtype) if len(field) else \
        np.zeros(0, dtype)


# ====================================================================== transitions
def batch_to_msg(batch: Mapping[str, np.ndarray], worker_id: int, source: str = 'sim',
                 stamp: Any = None, frame_id: str = '', msgs: Any = None) -> Any:
    """
    Build a ``TransitionBatch`` from an ``EnvWorker.step`` batch.

    :param batch: ``obs``, ``action``, ``reward``, ``next_obs``, ``terminated``,
        ``truncated``, ``policy_version`` with a leading batch dimension.
    :param worker_id: the sending worker.
    :param source: ``'sim'`` or ``'real'``.
    :param stamp: ``builtin_interfaces/Time`` of the header (left zero when ``None``).
    :param frame_id: header frame id.
    :param msgs: message module (tests); ``async_rl_ros_interfaces.msg`` by default.
    """
    if source not in SOURCES:
        raise ValueError(f'source = {source!r} is not allowed (one of {SOURCES})')
    obs = np.asarray(batch['obs'], np.float32)
    action = np.asarray(batch['action'], np.float32)
    count = obs.shape[0]
    msg = interfaces(msgs).TransitionBatch()
    if stamp is not None:
        msg.header.stamp = stamp
    msg.header.frame_id = frame_id
    msg.worker_id = int(worker_id)
    msg.source = source
    msg.count = count
    msg.obs_dim = obs.shape[1]
    msg.act_dim = action.shape[1]
    msg.policy_version = _typed('q', '<i8', np.broadcast_to(batch['policy_version'], count))
    msg.observations = _f32(obs)
    msg.actions = _f32(action)
    msg.rewards = _f32(batch['reward'])
    msg.next_observations = _f32(batch['next_obs'])
    msg.terminated = _typed('B', np.uint8, batch['terminated'])
    msg.truncated = _typed('B', np.uint8, batch['truncated'])
    return msg


def msg_to_batch(msg: Any, obs_dim: int | None = None, act_dim: int | None = None
                 ) -> dict[str, np.ndarray]:
    """
    Turn a ``TransitionBatch`` into the batch ``Learner.ingest`` takes.

    :param msg: the message.
    :param obs_dim: expected observation width (checked when given).
    :param act_dim: expected action width (checked when given).
    :returns: ``obs``, ``action``, ``reward``, ``next_obs``, ``terminated``, ``truncated``,
        ``policy_version``, ``worker_id`` and ``source`` (int8 index in ``SOURCES``, the
        replay's field; the message's string stays in ``msg.source``).
    :raises CodecError: ``'shape'`` when counts and dimensions do not fit the arrays or the
        expected widths, ``'format'`` for an unknown source.
    """
    n, od, ad = int(msg.count), int(msg.obs_dim), int(msg.act_dim)
    if not (0 < od <= _MAX_DIM and 0 < ad <= _MAX_DIM):
        raise CodecError('shape', f'obs_dim {od}, act_dim {ad}')
    if (obs_dim is not None and od != obs_dim) or (act_dim is not None and ad != act_dim):
        raise CodecError('shape', f'dimensions {od}/{ad}, expected {obs_dim}/{act_dim}')
    if msg.source not in SOURCES:
        raise CodecError('format', f'source {msg.source!r} (one of {SOURCES})')
    sizes = {'observations': n * od, 'next_observations': n * od, 'actions': n * ad,
             'rewards': n, 'terminated': n, 'truncated': n, 'policy_version': n}
    for field, size in sizes.items():
        if len(getattr(msg, field)) != size:
            raise CodecError('shape', f'{field} has {len(getattr(msg, field))} values, '
                             f'count {n} needs {size}')
    return {
        'obs': _view(msg.observations, np.float32).reshape(n, od).copy(),
        'action': _view(msg.actions, np.float32).reshape(n, ad).copy(),
        'reward': _view(msg.rewards, np.float32).copy(),
        'next_obs': _view(msg.next_observations, np.float32).reshape(n, od).copy(),
        'terminated': _view(msg.terminated, np.uint8).astype(bool),
        'truncated': _view(msg.truncated, np.uint8).astype(bool),
        'policy_version': _view(msg.policy_version, np.int64).copy(),
        'worker_id': np.full(n, int(msg.worker_id), np.int32),
        'source': np.full(n, SOURCES.index(msg.source), np.int8),
    }


# ====================================================================== tensors
def tensor_to_msg(tensor: QuantizedTensor, msgs: Any = None) -> Any:
    """Build a ``QuantizedTensor`` message from the codec's :class:`QuantizedTensor`."""
    msg = interfaces(msgs).QuantizedTensor()
    msg.name = tensor.name
    msg.shape = _typed('I', '<u4', np.asarray(tensor.shape, np.int64))
    msg.encoding = int(tensor.encoding)
    msg.scales = _f32(tensor.scales)
    msg.zero_points = array('B', tensor.zero_points.tobytes())
    msg.payload = array('B', tensor.payload)
    return msg


def msg_to_tensor(msg: Any) -> QuantizedTensor:
    """
    Rebuild the codec's :class:`QuantizedTensor` from a message (decoding checks the rest).

    :raises CodecError: ``'shape'`` when scales and zero points differ in number.
    """
    if len(msg.scales) != len(msg.zero_points):
        raise CodecError('shape', f'{msg.name}: {len(msg.scales)} scales, '
                         f'{len(msg.zero_points)} zero points')
    return QuantizedTensor(msg.name, tuple(_view(msg.shape, np.uint32).tolist()),
                           int(msg.encoding), _view(msg.scales, np.float32),
                           _view(msg.zero_points, np.uint8), bytes(msg.payload))


def float_tensor_to_msg(name: str, values: Any, msgs: Any = None) -> Any:
    """Build a ``FloatTensor`` message (a scalar has an empty shape)."""
    array_ = np.asarray(values, np.float32)
    msg = interfaces(msgs).FloatTensor()
    msg.name = name
    msg.shape = _typed('I', '<u4', np.asarray(array_.shape, np.int64))
    msg.values = _f32(array_.reshape(-1))
    return msg


def msg_to_float_tensor(msg: Any) -> tuple[str, np.ndarray]:
    """
    Return ``(name, float32 array)`` of a ``FloatTensor``.

    :raises CodecError: ``'shape'`` when the values do not fill the shape.
    """
    shape = tuple(_view(msg.shape, np.uint32).tolist())
    if len(msg.values) != math.prod(shape):
        raise CodecError('shape', f'{msg.name}: {len(msg.values)} values for shape {shape}')
    return msg.name, _view(msg.values, np.float32).reshape(shape).copy()


# ====================================================================== shard packets
def shard_packet_to_msg(sp: ShardPacket, kind: str = 'PolicyWeights', stamp: Any = None,
                        msgs: Any = None) -> Any:
    """
    Build a ``PolicyWeights`` or ``WeightsCommit`` message (they carry the same fields).

    :param sp: the shard's packet.
    :param kind: ``'PolicyWeights'`` or ``'WeightsCommit'``.
    :param stamp: header time.
    :param msgs: message module (tests).
    """
    if kind not in ('PolicyWeights', 'WeightsCommit'):
        raise ValueError(f'kind = {kind!r} is not allowed (PolicyWeights or WeightsCommit)')
    module = interfaces(msgs)
    msg = getattr(module, kind)()
    if stamp is not None:
        msg.header.stamp = stamp
    packet = sp.packet
    msg.version = int(packet.version)
    msg.base_version = int(packet.base_version)
    msg.shard_id = int(sp.shard_id)
    msg.num_shards = int(sp.num_shards)
    msg.run_id = int(sp.run_id)
    msg.chunk_size = int(sp.chunk_size)
    layout = []
    for name, shape in sp.layout.items():
        spec = module.TensorSpec()
        spec.name = name
        spec.shape = _typed('I', '<u4', np.asarray(shape, np.int64))
        layout.append(spec)
    msg.layout = layout
    msg.tensors = [tensor_to_msg(t, module) for t in packet.tensors]
    msg.extras = [float_tensor_to_msg(k, v, module) for k, v in packet.extras.items()]
    msg.crc32 = int(packet.crc32) & 0xFFFFFFFF
    return msg


def msg_to_shard_packet(msg: Any) -> ShardPacket:
    """
    Rebuild a :class:`ShardPacket` from a ``PolicyWeights`` or ``WeightsCommit`` message.

    :raises CodecError: ``'shape'`` / ``'format'`` for inconsistent fields (the CRC, the
        versions and the partitions are then checked by the shard or the assembler).
    """
    if not 0 <= msg.shard_id < msg.num_shards:
        raise CodecError('format', f'shard {msg.shard_id} of {msg.num_shards}')
    layout = {}
    for spec in msg.layout:
        if spec.name in layout:
            raise CodecError('format', f'tensor {spec.name!r} twice in the layout')
        layout[spec.name] = tuple(_view(spec.shape, np.uint32).tolist())
    extras = dict(msg_to_float_tensor(e) for e in msg.extras)
    if len(extras) != len(msg.extras):
        raise CodecError('format', 'duplicate extra names')
    packet = WeightPacket(int(msg.version), int(msg.base_version),
                          [msg_to_tensor(t) for t in msg.tensors], extras, int(msg.crc32))
    return ShardPacket(int(msg.shard_id), int(msg.num_shards), int(msg.chunk_size), layout,
                       packet, int(msg.run_id))


def status_to_receiver_stats(msg: Any) -> dict[str, int]:
    """
    Return what a ``WorkerStatus`` says the worker received, as receiver statistics.

    The keys of :meth:`~async_rl_ros.core.weights.receiver.WeightReceiver.stats` plus
    ``policies``, as :func:`~async_rl_ros.core.weights.receiver.weights_summary` takes them.
    """
    return {'policies': int(msg.policies_received),
            'weights/full_packets': int(msg.weights_full_packets),
            'weights/delta_packets': int(msg.weights_delta_packets),
            'weights/resyncs': int(msg.weights_resyncs),
            'weights/bytes_received': int(msg.weights_bytes_received)}
