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

"""Weight codec: quantization bounds, error feedback, byte layout and packet rejection."""

from __future__ import annotations

import struct
import zlib

from async_rl_ros.core.config import ConfigError
from async_rl_ros.core.learning.networks import Actor, PolicyForExport
from async_rl_ros.core.records import PolicyState
from async_rl_ros.core.weights.codec import (CodecConfig, CodecError, dequantize,
                                             encode_policy_state, ENCODING_FP32,
                                             ENCODING_INT16, ENCODING_INT16_ZLIB, ENCODING_INT8,
                                             ENCODING_INT8_ZLIB, FORMAT_VERSION, HEADER_SIZE,
                                             MAGIC, quantize, QuantizedTensor, REJECT_REASONS,
                                             WeightDecoder, WeightEncoder, WeightPacket)
from async_rl_ros.core.weights.quantize import (dequantize_wide, quantize_wide, row_steps,
                                                wide_planes)
from hypothesis import given, settings
from hypothesis import strategies as st
import numpy as np
import pytest
import torch

REL = 2.0**-22  # float32 rounding slack of the reconstruction, relative to |value|


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def tensors(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {'w': rng.normal(0.0, 0.1, size=(8, 5)).astype(np.float32),
            'b': rng.normal(0.0, 0.1, size=8).astype(np.float32),
            'head': rng.normal(0.0, 3.0, size=(2, 3, 2)).astype(np.float32)}


def row_scales(qt: QuantizedTensor) -> np.ndarray:
    """Return each element's step, broadcast to the tensor's shape."""
    rows = len(qt.scales)
    per_row = qt.numel // rows if rows else 0
    return np.broadcast_to(qt.scales[:, None], (rows, per_row)).reshape(qt.shape)


def assert_within_half_step(target: np.ndarray, decoded: np.ndarray, qt: QuantizedTensor):
    bound = row_scales(qt) / 2 + REL * np.abs(target) + 1e-12
    assert np.all(np.abs(decoded - target) <= bound)


def small_packet_bytes() -> tuple[bytes, WeightDecoder]:
    """Return a delta packet's bytes and a decoder that holds its base version."""
    enc, dec = WeightEncoder(), WeightDecoder()
    first = tensors(0)
    dec.apply(enc.encode(first, 1, {'obs_mean': np.zeros(3)}))
    moved = {k: v + 0.01 for k, v in first.items()}
    return enc.encode(moved, 2, {'obs_mean': np.ones(3)}).to_bytes(), dec


# ------------------------------------------------------------------ configuration
def test_config_defaults_and_ranges():
    cfg = CodecConfig()
    cfg.validate()
    assert (cfg.per_channel, cfg.entropy_coding, cfg.delta, cfg.full_every) == \
        (True, 'zlib', True, 10)
    assert (cfg.keyframe_bits, cfg.delta_refine) == (12, 8)
    for key, bad in [('zlib_level', 0), ('entropy_coding', 'lzma'), ('bits', 8),
                     ('full_every', 0), ('keyframe_bits', 7), ('keyframe_bits', 17),
                     ('delta_refine', 0)]:
        with pytest.raises(ConfigError):
            cfg.replace(**{key: bad})


# ------------------------------------------------------------------ quantization
@pytest.mark.parametrize('bits', [8, 12, 16])
def test_full_round_trip_within_half_step(bits):
    enc, dec = WeightEncoder(CodecConfig(keyframe_bits=bits)), WeightDecoder()
    data = tensors()
    packet = enc.encode(data, 3)
    assert not packet.is_delta and packet.base_version == -1
    out = dec.apply(WeightPacket.from_bytes(packet.to_bytes()))
    for qt in packet.tensors:
        wide = (ENCODING_INT16, ENCODING_INT16_ZLIB)
        assert qt.encoding in ((ENCODING_INT8, ENCODING_INT8_ZLIB) if bits == 8 else wide)
        if bits > 8:  # symmetric: the step is the row's peak over 2**(bits - 1) - 1
            peak = np.abs(data[qt.name]).reshape(len(qt.scales), -1).max(axis=1)
            np.testing.assert_allclose(qt.scales, peak / (2 ** (bits - 1) - 1), rtol=1e-6)
        assert out[qt.name].dtype == np.float32 and out[qt.name].shape == data[qt.name].shape
        assert_within_half_step(data[qt.name], out[qt.name], qt)
        np.testing.assert_array_equal(out[qt.name], enc.reference[qt.name])


@settings(max_examples=60, deadline=None)
@given(shape=st.lists(st.integers(0, 6), min_size=0, max_size=3),
       magnitude=st.sampled_from([1e-30, 1e-6, 1.0, 1e6]), offset=st.floats(-1.0, 1.0),
       seed=st.integers(0, 2**31 - 1), per_channel=st.booleans())
def test_quantize_error_bound_any_shape(shape, magnitude, offset, seed, per_channel):
    x = ((np.random.default_rng(seed).normal(size=shape) + offset) * magnitude).astype(
        np.float32)
    codes, scales, zero_points = quantize(x, per_channel)
    assert codes.shape == x.shape and codes.dtype == np.uint8
    rows = x.shape[0] if per_channel and x.ndim >= 2 else 1
    assert scales.shape == zero_points.shape == (rows,)
    qt = QuantizedTensor('x', x.shape, ENCODING_INT8, scales, zero_points, codes.tobytes())
    decoded = dequantize(codes, scales, zero_points)
    np.testing.assert_array_equal(decoded, qt.values())
    assert_within_half_step(x, decoded, qt)
    # 0 is exactly representable.
    assert np.all(dequantize(zero_points.astype(np.uint8), scales, zero_points) == 0)


@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.integers(0, 6), min_size=0, max_size=3),
       magnitude=st.sampled_from([1e-30, 1e-6, 1.0, 1e6]), bits=st.integers(9, 16),
       seed=st.integers(0, 2**31 - 1))
def test_wide_codes_error_bound_and_byte_planes(shape, magnitude, bits, seed):
    x = (np.random.default_rng(seed).normal(size=shape) * magnitude).astype(np.float32)
    codes, scales = quantize_wide(x, bits)
    assert codes.dtype == np.int16 and np.abs(codes).max(initial=0) <= 2 ** (bits - 1) - 1
    qt = QuantizedTensor('x', x.shape, ENCODING_INT16, scales, np.zeros(len(scales)),
                         wide_planes(codes))
    decoded = qt.values()
    np.testing.assert_array_equal(decoded, dequantize_wide(codes, scales))
    assert_within_half_step(x, decoded, qt)
    if len(scales):  # zero points must be 0: anything else is refused
        bad = QuantizedTensor('x', x.shape, ENCODING_INT16, scales,
                              np.ones(len(scales)), wide_planes(codes))
        with pytest.raises(CodecError, match='encoding'):
            bad.values()


def test_per_channel_scales_follow_each_row():
    x = np.ones((4, 16), dtype=np.float32) * np.array([[1e-3], [1.0], [-5.0], [0.0]],
                                                      dtype=np.float32)
    x[:, 0] = 0.0
    _, scales, zero_points = quantize(x, per_channel=True)
    np.testing.assert_allclose(scales, [1e-3 / 254, 1.0 / 254, 5.0 / 254, 0.0], rtol=1e-6)
    np.testing.assert_array_equal(zero_points, [0, 0, 254, 0])
    _, scales, _ = quantize(x, per_channel=False)
    np.testing.assert_allclose(scales, [6.0 / 254], rtol=1e-6)
    packet = WeightEncoder(CodecConfig(per_channel=False)).encode({'x': x, 'b': x[0]}, 0)
    assert [len(t.scales) for t in packet.tensors] == [1, 1]
    packet = WeightEncoder().encode({'x': x, 'b': x[0]}, 0)
    assert [len(t.scales) for t in packet.tensors] == [4, 1]
    # A small row keeps its resolution next to a large one.
    out = WeightDecoder().apply(packet)['x']
    assert np.abs(out[0] - x[0]).max() <= 1e-3 / 254


def test_constant_and_zero_tensors():
    data = {'zeros': np.zeros((3, 4), np.float32), 'const': np.full((3, 4), -2.5, np.float32),
            'scalar': np.float32(7.0), 'empty': np.zeros((0, 4), np.float32)}
    enc, dec = WeightEncoder(), WeightDecoder()
    packet = enc.encode(data, 0)
    by_name = {t.name: t for t in packet.tensors}
    np.testing.assert_array_equal(by_name['zeros'].scales, 0.0)
    out = dec.apply(packet)
    np.testing.assert_array_equal(out['zeros'], 0.0)
    np.testing.assert_allclose(out['const'], -2.5, rtol=1e-6)
    np.testing.assert_allclose(out['scalar'], 7.0, rtol=1e-6)
    assert out['scalar'].shape == () and out['empty'].shape == (0, 4)
    # An unchanged delta of a zero tensor stays exact.
    out = dec.apply(enc.encode(data, 1))
    np.testing.assert_array_equal(out['zeros'], 0.0)


def test_fp32_passthrough_is_exact():
    data = tensors()
    enc, dec = WeightEncoder(CodecConfig(quantize=False)), WeightDecoder()
    packet = enc.encode(data, 0)
    assert {t.encoding for t in packet.tensors} == {ENCODING_FP32}
    assert all(len(t.scales) == 0 for t in packet.tensors)
    out = dec.apply(WeightPacket.from_bytes(packet.to_bytes()))
    for name, value in data.items():
        np.testing.assert_array_equal(out[name], value)
    moved = {k: v * 1.5 for k, v in data.items()}
    packet = enc.encode(moved, 1)
    assert packet.is_delta
    out = dec.apply(packet)
    for name, value in moved.items():
        np.testing.assert_allclose(out[name], value, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize('refine', [1, 8, 256])
def test_delta_round_trip_within_half_step(refine):
    enc, dec = WeightEncoder(CodecConfig(delta_refine=refine)), WeightDecoder()
    data = tensors()
    dec.apply(enc.encode(data, 0))
    rng = np.random.default_rng(1)
    moved = {k: v + rng.normal(0, 1e-3, v.shape).astype(np.float32) for k, v in data.items()}
    packet = enc.encode(moved, 1)
    assert packet.is_delta and packet.base_version == 0
    out = dec.apply(packet)
    for qt in packet.tensors:
        assert_within_half_step(moved[qt.name], out[qt.name], qt)
        np.testing.assert_array_equal(out[qt.name], enc.reference[qt.name])
        # Never finer than a full int8 packet's step over delta_refine, and exactly that
        # step where the delta fits in 254 of them.
        floor = (row_steps(moved[qt.name], True) / refine).astype(np.float32)
        assert np.all(qt.scales >= floor)
        fits = np.abs(out[qt.name] - enc.keyframe[qt.name]).reshape(len(floor), -1).max(
            axis=1) < 100 * floor
        np.testing.assert_array_equal(qt.scales[fits], floor[fits])


def test_keyframe_deltas_have_no_drift_over_1000_commits():
    """A random walk committed 1,000 times stays within half a step of its target, every time."""
    rng = np.random.default_rng(7)
    enc, dec = WeightEncoder(CodecConfig(full_every=10**6)), WeightDecoder()
    target = {'w': rng.normal(0, 0.1, size=(16, 24)).astype(np.float32),
              'b': rng.normal(0, 0.1, size=16).astype(np.float32)}
    worst = 0.0
    for version in range(1000):
        packet = enc.encode(target, version)
        assert packet.is_delta == (version > 0)
        assert packet.base_version == (0 if version else -1)  # always the keyframe
        out = dec.apply(packet)
        for qt in packet.tensors:
            error = np.abs(out[qt.name] - target[qt.name])
            step = row_scales(qt)
            assert np.all(error <= step + REL * np.abs(target[qt.name])), version
            worst = max(worst, float((error / np.maximum(step, 1e-30)).max()))
            np.testing.assert_array_equal(out[qt.name], enc.reference[qt.name])
        # Slow drift (much smaller than a step) plus occasional jumps.
        for name, value in target.items():
            value += rng.normal(0, 2e-5, value.shape).astype(np.float32)
            if version % 97 == 0:
                value += rng.normal(0, 1e-2, value.shape).astype(np.float32)
    assert worst <= 0.5 + 1e-3


def test_a_receiver_that_missed_deltas_applies_the_next_one():
    enc, dec = WeightEncoder(CodecConfig(full_every=10)), WeightDecoder()
    rng = np.random.default_rng(3)
    data = tensors()
    packets = []
    for version in range(10):
        data = {k: v + rng.normal(0, 1e-3, v.shape).astype(np.float32) for k, v in data.items()}
        packets.append(enc.encode(data, version))
    dec.apply(packets[0])
    out = dec.apply(packets[7])  # 1..6 were missed (a latest-value channel)
    for qt in packets[7].tensors:
        np.testing.assert_array_equal(out[qt.name], enc.keyframe[qt.name] + qt.values())
    dec.apply(packets[9])
    np.testing.assert_array_equal(dec.tensors['w'], enc.reference['w'])


def test_encode_sends_full_packets_as_configured():
    enc = WeightEncoder(CodecConfig(full_every=3))
    data = tensors()
    kinds = [enc.encode(data, v).is_delta for v in range(7)]
    assert kinds == [False, True, True, False, True, True, False]
    enc.request_full()
    assert not enc.encode(data, 7).is_delta
    assert not enc.encode({**data, 'new': np.ones(2)}, 8).is_delta  # layout changed
    assert not any(WeightEncoder(CodecConfig(delta=False)).encode(data, v).is_delta
                   for v in range(3))


def test_encoder_refuses_bad_input():
    enc = WeightEncoder()
    with pytest.raises(ValueError, match='non-finite'):
        enc.encode({'w': np.array([1.0, np.nan])}, 0)
    with pytest.raises(ValueError, match='keyframe'):
        enc.encode_delta(tensors(), 0)
    enc.encode_full(tensors(), 5)
    with pytest.raises(ValueError, match='not greater'):
        enc.encode(tensors(), 5)
    with pytest.raises(ValueError, match='base_version'):
        enc.encode_delta(tensors(), 6, base_version=4)
    with pytest.raises(ValueError, match='do not match'):
        enc.encode_delta({'w': np.zeros(3)}, 6)
    assert enc.version == 5
    assert enc.encode_delta(tensors(), 6, base_version=5).base_version == 5
    reference = enc.reference
    with pytest.raises(ValueError, match='too long'):
        enc.encode({k: v + 1 for k, v in tensors().items()}, 7, {'x' * 70_000: np.zeros(1)})
    assert enc.version == 6 and enc.reference is reference  # a failed encode changes nothing


# ------------------------------------------------------------------ byte layout
def test_bytes_layout_round_trip():
    data = tensors()
    extras = {'obs_mean': np.arange(3, dtype=np.float32), 'obs_clip': np.float32(np.inf)}
    packet = WeightEncoder().encode(data, 2**40, extras)
    raw = packet.to_bytes()
    magic, fmt, flags, length, crc = struct.unpack_from('<4sHHII', raw)
    assert (magic, fmt, flags, length, crc) == \
        (MAGIC, FORMAT_VERSION, 0, len(raw) - HEADER_SIZE, packet.crc32)
    assert crc == zlib.crc32(raw[HEADER_SIZE:]) == packet.compute_crc()
    # Body size from the documented layout.
    expected = 8 + 8 + 2 + 2
    for t in packet.tensors:
        expected += 2 + len(t.name) + 1 + 1 + 4 * len(t.shape) + 4 + 5 * len(t.scales) + 4 + \
            len(t.payload)
    for key, value in extras.items():
        expected += 2 + len(key) + 1 + 4 * np.ndim(value) + 4 * np.size(value)
    assert length == expected
    back = WeightPacket.from_bytes(bytearray(raw))
    assert (back.version, back.base_version, back.crc32) == (2**40, -1, packet.crc32)
    assert back.to_bytes() == raw
    for a, b in zip(packet.tensors, back.tensors):
        assert (a.name, a.shape, a.encoding, a.payload) == (b.name, b.shape, b.encoding,
                                                            b.payload)
        np.testing.assert_array_equal(a.scales, b.scales)
        np.testing.assert_array_equal(a.zero_points, b.zero_points)
    assert list(back.extras) == list(extras)
    np.testing.assert_array_equal(back.extras['obs_mean'], extras['obs_mean'])
    assert back.extras['obs_clip'].shape == () and np.isinf(back.extras['obs_clip'])


def test_policy_state_round_trip():
    actor = Actor(4, 2, (8,))
    state = PolicyState(actor=actor.state_dict(), obs_mean=np.ones(4, np.float32),
                        obs_std=np.full(4, 2.0, np.float32), obs_clip=5.0, version=3)
    dec = WeightDecoder()
    assert dec.policy_state() is None
    dec.apply(encode_policy_state(WeightEncoder(), state))
    out = dec.policy_state()
    assert out.version == 3 and out.obs_clip == 5.0
    np.testing.assert_array_equal(out.obs_std, 2.0)
    assert set(out.actor) == set(actor.state_dict())
    assert all(isinstance(v, torch.Tensor) for v in out.actor.values())


# ------------------------------------------------------------------ rejection
def _set(obj, **fields):
    for key, value in fields.items():
        setattr(obj, key, value)


def test_crc_mismatch_is_rejected_and_last_good_state_kept():
    raw, dec = small_packet_bytes()
    before, version = dec.tensors, dec.version
    corrupt = bytearray(raw)
    corrupt[-3] ^= 0x10
    with pytest.raises(CodecError) as info:
        dec.apply_bytes(bytes(corrupt))
    assert info.value.reason == 'crc'
    assert dec.version == version and dec.rejected['crc'] == 1
    for name, value in before.items():
        np.testing.assert_array_equal(dec.tensors[name], value)
    # The same check guards packets built from message fields (no byte layer).
    packet = WeightPacket.from_bytes(raw)
    packet.tensors[0].scales[0] *= 2.0
    with pytest.raises(CodecError, match='crc'):
        dec.apply(packet)
    assert dec.rejected['crc'] == 2 and dec.stats()['codec/rejected_crc'] == 2
    dec.apply_bytes(raw)  # the intact packet still applies
    assert dec.version == 2 and dec.stats()['codec/accepted'] == 2


def test_10000_random_single_bit_flips_are_all_rejected():
    raw, dec = small_packet_bytes()
    before = dec.tensors
    rng = np.random.default_rng(0)
    positions = rng.integers(0, 8 * len(raw), size=10_000)
    accepted = 0
    for bit in positions:
        corrupt = bytearray(raw)
        corrupt[bit // 8] ^= 1 << int(bit % 8)
        try:
            dec.apply_bytes(bytes(corrupt))
            accepted += 1
        except CodecError as exc:
            assert exc.reason in REJECT_REASONS
    assert accepted == 0
    assert sum(dec.rejected.values()) == 10_000 and dec.version == 1
    assert dec.rejected['crc'] > 9000
    for name, value in before.items():
        np.testing.assert_array_equal(dec.tensors[name], value)


def test_versions_must_increase():
    enc, dec = WeightEncoder(CodecConfig(delta=False)), WeightDecoder()
    old, new = enc.encode(tensors(0), 4), enc.encode(tensors(1), 5)
    dec.apply(new)
    for packet in (old, new):
        with pytest.raises(CodecError) as info:
            dec.apply(packet)
        assert info.value.reason == 'version'
    assert dec.version == 5 and dec.rejected['version'] == 2


def test_delta_on_the_wrong_base_is_rejected():
    enc, dec = WeightEncoder(CodecConfig(full_every=2)), WeightDecoder()
    full = enc.encode(tensors(0), 0)
    first = enc.encode(tensors(1), 1)
    key = enc.encode(tensors(2), 2)
    second = enc.encode(tensors(3), 3)
    with pytest.raises(CodecError, match='base_version'):
        dec.apply(first)  # no keyframe yet
    assert dec.lacks_base(first)
    dec.apply(full)
    with pytest.raises(CodecError, match='base_version'):
        dec.apply(second)  # its keyframe (version 2) was missed
    assert dec.rejected['base_version'] == 2 and dec.version == 0
    dec.apply(first)
    dec.apply(key)
    dec.apply(second)
    assert dec.version == 3 and dec.key_version == 2


def test_shape_mismatch_is_rejected():
    dec = WeightDecoder()
    dec.apply(WeightEncoder().encode(tensors(), 0))
    for data in ({**tensors(), 'w': np.zeros((8, 6), np.float32)},
                 {k: v for k, v in tensors().items() if k != 'b'}):
        with pytest.raises(CodecError) as info:
            dec.apply(WeightEncoder().encode(data, dec.version + 1))
        assert info.value.reason == 'shape'
    dec.apply(WeightEncoder().encode(tensors(), 9, {'obs_mean': np.zeros(3)}))
    with pytest.raises(CodecError, match='shape'):
        dec.apply(WeightEncoder().encode(tensors(), 10, {'obs_mean': np.zeros(2)}))
    assert dec.rejected['shape'] == 3 and dec.version == 9
    np.testing.assert_array_equal(dec.extras['obs_mean'], np.zeros(3))
    dec.reset()
    dec.apply(WeightEncoder().encode({'w': np.zeros((8, 6), np.float32)}, 1))


def test_payload_that_does_not_fit_its_shape_is_rejected():
    packet = WeightEncoder(CodecConfig(entropy_coding='none')).encode(tensors(), 0)
    packet.tensors[0].payload = packet.tensors[0].payload[:-1]
    with pytest.raises(CodecError, match='shape'):
        WeightDecoder().apply(packet.seal())


def test_truncated_bytes_are_rejected():
    raw, dec = small_packet_bytes()
    for size in range(len(raw)):
        with pytest.raises(CodecError) as info:
            dec.apply_bytes(raw[:size])
        assert info.value.reason == 'truncated'
    assert dec.rejected['truncated'] == len(raw) and dec.version == 1


@pytest.mark.parametrize('mutate, reason', [
    (lambda p: setattr(p.tensors[0], 'encoding', 9), 'encoding'),
    (lambda p: _set(p.tensors[0], encoding=ENCODING_INT8_ZLIB,
                    payload=b'\x78\x9c' + b'\x00' * 10), 'encoding'),
    (lambda p: p.tensors[0].scales.__setitem__(0, np.nan), 'encoding'),
    (lambda p: p.tensors[0].scales.__setitem__(0, -1.0), 'encoding'),
    (lambda p: _set(p.tensors[0], scales=np.ones(3, np.float32),
                    zero_points=np.zeros(3, np.uint8)), 'shape'),
    (lambda p: setattr(p, 'tensors', p.tensors + p.tensors[:1]), 'format'),
    (lambda p: setattr(p, 'base_version', -5), 'format'),
    (lambda p: p.tensors[0].scales.fill(3e38), 'non_finite'),
])
def test_malformed_packets_with_valid_crc_are_rejected(mutate, reason):
    packet = WeightEncoder().encode(tensors(), 0)
    mutate(packet)
    raw = packet.seal().to_bytes()
    dec = WeightDecoder()
    with pytest.raises(CodecError) as info:
        dec.apply_bytes(raw)
    assert info.value.reason == reason
    assert dec.rejected == {reason: 1} and dec.version == -1 and dec.tensors == {}


def test_bad_header_and_trailing_bytes_are_rejected():
    raw, dec = small_packet_bytes()
    for corrupt in (b'XXXX' + raw[4:], raw[:4] + b'\x02' + raw[5:], raw + b'\x00'):
        with pytest.raises(CodecError, match='format'):
            dec.apply_bytes(corrupt)
    assert dec.rejected['format'] == 3


# ------------------------------------------------------------------ a real actor
def test_decoded_actor_acts_like_the_original():
    torch.manual_seed(0)
    actor = Actor(21, 6, (32, 32))
    obs_mean = np.linspace(-1, 1, 21).astype(np.float32)
    obs_std = np.linspace(0.5, 2, 21).astype(np.float32)
    enc, dec = WeightEncoder(), WeightDecoder()
    obs = torch.as_tensor(np.random.default_rng(0).normal(size=(2000, 21)) * 2,
                          dtype=torch.float32)
    optimizer = torch.optim.Adam(actor.parameters(), lr=3e-4)
    for version in range(6):
        state = PolicyState(actor=actor.state_dict(), obs_mean=obs_mean, obs_std=obs_std,
                            obs_clip=5.0, version=version)
        packet = encode_policy_state(enc, state)
        assert packet.is_delta == (version > 0)
        dec.apply_bytes(packet.to_bytes())
        received = dec.policy_state()
        policy = PolicyForExport(21, 6, (32, 32))
        policy.load_actor_state_dict(received.actor)
        policy.set_normalization(received.obs_mean, received.obs_std,
                                 received.obs_clip)
        reference = actor.deterministic_policy(torch.as_tensor(obs_mean),
                                               torch.as_tensor(obs_std))
        reference.set_normalization(None, None, 5.0)
        with torch.no_grad():
            deviation = (policy(obs) - reference(obs)).abs().max().item()
        assert deviation <= 1e-2, (version, deviation)
        for _ in range(10):  # a few training steps between commits
            loss = actor(obs[:256])[0].pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


@pytest.mark.parametrize('extras', [{'obs_mean': np.full(3, np.nan)}, {'obs_std': np.zeros(3)},
                                    {'obs_clip': np.float32(-1)}])
def test_unusable_normalizer_statistics_are_rejected_before_acceptance(extras):
    enc, dec = WeightEncoder(), WeightDecoder()
    good = {'obs_mean': np.zeros(3), 'obs_std': np.ones(3), 'obs_clip': np.float32(5)}
    dec.apply(enc.encode(tensors(0), 1, good))
    before = dec.tensors
    with pytest.raises(CodecError) as info:
        dec.apply(enc.encode(tensors(1), 2, {**good, **extras}))  # a valid CRC
    assert info.value.reason == 'extras' and dec.rejected['extras'] == 1
    assert dec.version == 1
    assert all(np.array_equal(before[k], v) for k, v in dec.tensors.items())
    np.testing.assert_array_equal(dec.extras['obs_std'], good['obs_std'])
