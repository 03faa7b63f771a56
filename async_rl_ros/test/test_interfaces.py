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
The .msg files parse with the ROS IDL parser, and the conversion module fits them.

Without ROS: message classes are generated here from the *parsed* .msg files, with rclpy's
field types (``array.array`` of the right type code for numeric sequences, ``str``,
``int``...) and no other attributes, and the conversion module runs against them. A field
the converters use that the .msg files lack, or with another type, fails these tests.
"""

from array import array
import dataclasses

from async_rl_ros.core.config import ParameterServerConfig
from async_rl_ros.core.records import PolicyState
from async_rl_ros.core.weights import codec
from async_rl_ros.core.weights.assembler import ShardAssembler
from async_rl_ros.core.weights.codec import CodecError
from async_rl_ros.core.weights.sharded_weights import ShardedCommitter, ShardReplica
from async_rl_ros.ros import conversions
from conftest import REPO, require_linter
import numpy as np
import pytest
import torch

MSG_DIR = REPO / 'async_rl_ros_interfaces' / 'msg'
PACKAGE = 'async_rl_ros_interfaces'
# Type codes rclpy uses for sequences of numbers (rosidl_generator_py).
TYPECODES = {'float32': 'f', 'float64': 'd', 'int8': 'b', 'uint8': 'B', 'int16': 'h',
             'uint16': 'H', 'int32': 'i', 'uint32': 'I', 'int64': 'q', 'uint64': 'Q'}
INT_BITS = {'int8': 8, 'uint8': 8, 'int16': 16, 'uint16': 16, 'int32': 32, 'uint32': 32,
            'int64': 64, 'uint64': 64}


def _parse_all():
    parser = require_linter('rosidl_adapter.parser')
    specs = {}
    for path in sorted(MSG_DIR.glob('*.msg')):
        specs[path.stem] = parser.parse_message_file(PACKAGE, str(path))
    return specs


def _check_scalar(kind, value, where):
    if kind == 'string':
        assert isinstance(value, str), where
    elif kind == 'bool':
        assert isinstance(value, bool), where
    elif kind in ('float32', 'float64'):
        assert isinstance(value, float), where
    else:
        assert isinstance(value, int) and not isinstance(value, bool), where
        bits = INT_BITS[kind]
        if kind.startswith('u'):
            low, high = 0, 2**bits - 1
        else:
            low, high = -2**(bits - 1), 2**(bits - 1) - 1
        assert low <= value <= high, where


class _Message:
    """Base of the generated classes: only the parsed fields, type-checked on assignment."""

    __slots__ = ('_values', '_assigned')
    FIELDS: dict = {}

    def __init__(self):
        object.__setattr__(self, '_values', {})
        object.__setattr__(self, '_assigned', set())
        for name, ftype in self.FIELDS.items():
            self._values[name] = self._default(ftype)

    def _default(self, ftype):
        if ftype.is_array:
            return array(TYPECODES[ftype.type]) if ftype.type in TYPECODES else []
        if not ftype.is_primitive_type():
            return self.REGISTRY[f'{ftype.pkg_name}/{ftype.type}']()
        return {'string': '', 'bool': False, 'float32': 0.0, 'float64': 0.0}.get(ftype.type, 0)

    def __getattr__(self, name):
        values = object.__getattribute__(self, '_values')
        if name not in values:
            raise AttributeError(f'{type(self).__name__} has no field {name!r}')
        return values[name]

    def __setattr__(self, name, value):
        if name not in self.FIELDS:
            raise AttributeError(f'{type(self).__name__} has no field {name!r}')
        ftype = self.FIELDS[name]
        where = f'{type(self).__name__}.{name}'
        if ftype.is_array and ftype.type in TYPECODES:
            if isinstance(value, array):
                assert value.typecode == TYPECODES[ftype.type], where
            else:
                value = array(TYPECODES[ftype.type], value)
        elif ftype.is_array:
            assert isinstance(value, list), where
            for item in value:
                self._check_item(ftype, item, where)
        else:
            self._check_item(ftype, value, where)
        self._values[name] = value
        self._assigned.add(name)

    def _check_item(self, ftype, value, where):
        if ftype.is_primitive_type():
            _check_scalar(ftype.type, value, where)
        else:
            cls = self.REGISTRY[f'{ftype.pkg_name}/{ftype.type}']
            assert isinstance(value, cls), f'{where}: {type(value).__name__}'


def _make_module():
    specs = _parse_all()
    registry = {}

    def make(name, fields, constants=()):
        cls = type(name, (_Message,), {'__slots__': (), 'FIELDS': fields,
                                       'REGISTRY': registry})
        for constant in constants:
            setattr(cls, constant.name, constant.value)
        return cls

    parser = require_linter('rosidl_adapter.parser')
    time = parser.parse_message_string('builtin_interfaces', 'Time',
                                       'int32 sec\nuint32 nanosec\n')
    header = parser.parse_message_string('std_msgs', 'Header',
                                         'builtin_interfaces/Time stamp\nstring frame_id\n')
    registry['builtin_interfaces/Time'] = make('Time', {f.name: f.type for f in time.fields})
    registry['std_msgs/Header'] = make('Header', {f.name: f.type for f in header.fields})
    module = type('msgs', (), {})
    for name, spec in specs.items():
        cls = make(name, {f.name: f.type for f in spec.fields}, spec.constants)
        registry[f'{PACKAGE}/{name}'] = cls
        setattr(module, name, cls)
    return module, specs


@pytest.fixture(scope='module')
def msgs():
    return _make_module()[0]


def test_every_message_parses_and_the_constants_match_the_core():
    specs = _parse_all()
    assert {'TransitionBatch', 'QuantizedTensor', 'PolicyWeights', 'WeightsCommit',
            'FloatTensor', 'TensorSpec', 'WorkerStatus', 'ShardStatus',
            'TrainingStats'} <= set(specs)
    constants = {c.name: c.value for c in specs['QuantizedTensor'].constants}
    assert constants == {'ENCODING_FP32': codec.ENCODING_FP32,
                         'ENCODING_INT8': codec.ENCODING_INT8,
                         'ENCODING_INT8_ZLIB': codec.ENCODING_INT8_ZLIB,
                         'ENCODING_INT16': codec.ENCODING_INT16,
                         'ENCODING_INT16_ZLIB': codec.ENCODING_INT16_ZLIB}
    sources = {c.value for c in specs['TransitionBatch'].constants
               if c.name.startswith('SOURCE_')}
    assert sources == set(conversions.SOURCES)
    # PolicyWeights and WeightsCommit carry the same fields (one converter serves both).
    fields = {k: [(f.name, str(f.type)) for f in specs[k].fields]
              for k in ('PolicyWeights', 'WeightsCommit')}
    assert sorted(fields['PolicyWeights']) == sorted(fields['WeightsCommit'])


def _batch(rng, n=5, obs_dim=21, act_dim=6):
    return {'obs': rng.normal(size=(n, obs_dim)).astype(np.float32),
            'action': rng.uniform(-1, 1, (n, act_dim)).astype(np.float32),
            'reward': rng.normal(size=n).astype(np.float32),
            'next_obs': rng.normal(size=(n, obs_dim)).astype(np.float32),
            'terminated': rng.random(n) < 0.3, 'truncated': rng.random(n) < 0.3,
            'policy_version': np.arange(n, dtype=np.int64) - 1,
            'worker_id': np.full(n, 3, np.int32)}


def test_transition_batches_round_trip_through_every_field(msgs):
    rng = np.random.default_rng(0)
    batch = _batch(rng)
    msg = conversions.batch_to_msg(batch, worker_id=3, source='real', msgs=msgs)
    unset = set(msgs.TransitionBatch.FIELDS) - msg._assigned
    assert unset == {'header'}, unset  # the header's fields are set in place
    back = conversions.msg_to_batch(msg, obs_dim=21, act_dim=6)
    assert back.pop('source').tolist() == [1] * len(batch['reward'])  # index of 'real'
    assert set(back) == set(conversions.TRANSITION_KEYS)
    for key, value in batch.items():
        np.testing.assert_array_equal(back[key], value, err_msg=key)
        assert back[key].dtype == np.asarray(value).dtype, key


@pytest.mark.parametrize('field, value', [('count', 6), ('obs_dim', 20), ('act_dim', 0)])
def test_inconsistent_transition_batches_are_rejected(msgs, field, value):
    msg = conversions.batch_to_msg(_batch(np.random.default_rng(1)), 0, msgs=msgs)
    setattr(msg, field, value)
    with pytest.raises(CodecError) as err:
        conversions.msg_to_batch(msg, obs_dim=21, act_dim=6)
    assert err.value.reason == 'shape'


def test_weight_shards_round_trip_and_assemble_from_messages(msgs):
    rng = np.random.default_rng(2)
    actor = {'trunk.0.weight': rng.normal(size=(32, 21)).astype(np.float32),
             'trunk.0.bias': rng.normal(size=32).astype(np.float32)}
    state = PolicyState(actor={k: torch.as_tensor(v) for k, v in actor.items()},
                        obs_mean=np.zeros(21, np.float32), obs_std=np.ones(21, np.float32),
                        obs_clip=10.0, version=0)
    cfg = ParameterServerConfig(num_shards=2, replicas=1, chunk_size=256)
    committer = ShardedCommitter(cfg, state)
    shards = [ShardReplica(i, 2) for i in range(2)]
    assembler = ShardAssembler()
    received, packets = {}, []
    for version in range(3):
        for shard in shards:
            commit = committer.full(shard.shard_id) if version == 0 else packets[shard.shard_id]
            commit = conversions.shard_packet_to_msg(commit, 'WeightsCommit', msgs=msgs)
            assert set(msgs.WeightsCommit.FIELDS) - commit._assigned == {'header'}
            shard.apply(conversions.msg_to_shard_packet(commit))
            weights = conversions.shard_packet_to_msg(shard.weights(), msgs=msgs)
            assert isinstance(weights, msgs.PolicyWeights)
            received[shard.shard_id] = conversions.msg_to_shard_packet(weights)
            received[shard.shard_id].verify()  # the CRC covers the shard fields too
            assert received[shard.shard_id].packet.is_delta == (version > 0)
            result = assembler.add(received[shard.shard_id])
        assert result is not None and result.version == version
        actor = {k: v + 0.01 for k, v in actor.items()}
        packets = committer.commit(dataclasses.replace(
            state, actor={k: torch.as_tensor(v) for k, v in actor.items()}))
    for name, value in result.actor.items():
        step = np.abs(actor[name]).max() / 127
        np.testing.assert_allclose(value.numpy(), actor[name] - 0.01, atol=step)
    corrupt = conversions.shard_packet_to_msg(shards[0].weights(), msgs=msgs)
    corrupt.tensors[0].payload[0] ^= 0xFF
    with pytest.raises(CodecError) as err:
        ShardAssembler().add(conversions.msg_to_shard_packet(corrupt))
    assert err.value.reason == 'crc'
    relaid = conversions.shard_packet_to_msg(shards[0].weights(), msgs=msgs)
    relaid.chunk_size += 1  # outside the packet body, inside the CRC
    with pytest.raises(CodecError) as err:
        assembler.add(conversions.msg_to_shard_packet(relaid))
    assert err.value.reason == 'crc' and assembler.version == 2


def test_float_tensors_keep_scalars_and_shapes(msgs):
    name, value = conversions.msg_to_float_tensor(
        conversions.float_tensor_to_msg('obs_clip', np.float32(5.0), msgs=msgs))
    assert name == 'obs_clip' and value.shape == () and value == 5.0
    msg = conversions.float_tensor_to_msg('m', np.ones((2, 3)), msgs=msgs)
    msg.shape = array('I', [4])
    with pytest.raises(CodecError):
        conversions.msg_to_float_tensor(msg)


def test_interfaces_package_xml_declares_a_rosidl_package():
    parse_package = require_linter('catkin_pkg.package').parse_package
    package = parse_package(str(MSG_DIR.parent / 'package.xml'))
    package.validate()
    assert package.package_format == 3 and package.name == PACKAGE
    assert package.get_build_type() == 'ament_cmake'
    assert 'rosidl_interface_packages' in [g.name for g in package.member_of_groups]
    assert 'rosidl_default_generators' in [d.name for d in package.buildtool_depends]
    assert 'rosidl_default_runtime' in [d.name for d in package.exec_depends]
    cmake = (MSG_DIR.parent / 'CMakeLists.txt').read_text(encoding='utf-8')
    for path in MSG_DIR.glob('*.msg'):
        assert f'"msg/{path.name}"' in cmake, path.name
