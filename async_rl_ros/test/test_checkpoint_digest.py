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

"""Checksummed checkpoints: damage is found before unpickling and resume falls back (#35)."""

from __future__ import annotations

import hashlib
import io
import logging
from pathlib import Path
import random
import struct

from async_rl_ros.core.config import LearnerConfig
from async_rl_ros.core.learning import ckpt_digest
from async_rl_ros.core.learning.checkpoint import (capture_rng_state, CheckpointManager,
                                                   restore_rng_state)
from async_rl_ros.core.learning.ckpt_digest import DigestError, TRAILER_SIZE
from async_rl_ros.core.learning.learner import Learner
from async_rl_ros.core.learning.resume import (CheckpointError, restore_learner, RestoreFailed,
                                               resume_learner)
import numpy as np
import pytest
import torch

torch.set_num_threads(1)

MISMATCH = ('its content does not match its checksum (the file was changed or damaged after it '
            'was written)')


def small_learner(tmp_path: Path) -> Learner:
    cfg = LearnerConfig().replace(**{'sac.hidden_sizes': [32, 32], 'batch.initial_batch': 64,
                                     'batch.min_batch': 8, 'replay.capacity': 1000,
                                     'checkpoint.directory': str(tmp_path / 'ckpt')})
    return Learner(cfg, 21, 6)


def two_checkpoints(tmp_path: Path) -> tuple[Path, Path]:
    """Save an older (300 env steps) and a newer (500 env steps) learner checkpoint."""
    learner = small_learner(tmp_path)
    learner.env_steps = 300
    older = Path(learner.save_checkpoint())
    learner.env_steps, learner.updates = 500, 1
    return older, Path(learner.save_checkpoint())


def flip(path: Path, bit: int) -> None:
    data = bytearray(path.read_bytes())
    data[bit // 8] ^= 1 << (bit % 8)
    path.write_bytes(bytes(data))


def test_a_sealed_checkpoint_is_still_a_plain_torch_file(tmp_path):
    manager = CheckpointManager(tmp_path)
    path = manager.save({'w': torch.arange(4.0)}, 1)
    body = path.read_bytes()[:-TRAILER_SIZE]
    assert path.read_bytes()[-8:] == b'ARLCKSUM'
    # The record: SHA-256 of the body, the length and the version; then the magic.
    digest, fields = path.read_bytes()[-TRAILER_SIZE:][:32], path.read_bytes()[-20:-8]
    assert struct.unpack('<QI', fields) == (len(body), 1)
    assert digest == hashlib.sha256(body + fields).digest()
    # Tools that call torch.load on the file directly still read it.
    assert torch.equal(torch.load(path, weights_only=True)['w'], torch.arange(4.0))
    assert torch.equal(manager.load(path)['w'], torch.arange(4.0))


def test_every_flipped_bit_is_refused_before_anything_is_unpickled(tmp_path, monkeypatch):
    older, newest = two_checkpoints(tmp_path)
    pristine = newest.read_bytes()
    bits = len(pristine) * 8
    rng = random.Random(35)
    positions = rng.sample(range(bits), 400)
    positions += list(range(bits - TRAILER_SIZE * 8, bits, 3))  # the checksum record itself
    positions += [0, 7, bits - 1]

    def no_unpickling(*args, **kwargs):
        raise AssertionError('torch.load was called on a damaged file')

    monkeypatch.setattr(torch, 'load', no_unpickling)
    manager = CheckpointManager(tmp_path / 'ckpt')
    for bit in positions:
        newest.write_bytes(pristine)
        flip(newest, bit)
        with pytest.raises(DigestError) as info:
            manager.load(newest)
        why = str(info.value)
        in_magic = bit >= bits - 64
        assert why == MISMATCH or (in_magic and why.startswith('truncated or damaged')), (bit,
                                                                                          why)


def test_a_damaged_newest_checkpoint_falls_back_to_the_older_one_and_names_it(tmp_path):
    older, newest = two_checkpoints(tmp_path)
    flip(newest, len(newest.read_bytes()) * 4)  # a bit in the middle
    fresh = small_learner(tmp_path)
    found = resume_learner(fresh)
    assert found.path == older and fresh.env_steps == 300
    assert found.skipped == [(newest, MISMATCH)]


@pytest.mark.parametrize('damage, words', [
    (lambda data: bytes(len(data)), 'bytes is zero (its content was lost after it was written'),
    (lambda data: data[:len(data) // 2], 'truncated or damaged: it does not end with the '
                                         'checksum record'),
    (lambda data: data[:-10], 'truncated or damaged'),
    (lambda data: data[:-4096] + bytes(4096), 'truncated or damaged'),
    (lambda data: b'', 'empty file (0 bytes)'),
])
def test_zeroed_and_truncated_files_are_described_in_plain_words(tmp_path, damage, words):
    older, newest = two_checkpoints(tmp_path)
    newest.write_bytes(damage(newest.read_bytes()))
    found = resume_learner(small_learner(tmp_path))
    assert found.path == older
    [(path, why)] = found.skipped
    assert path == newest and words in why, why
    for jargon in ('Errno', 'legacy', 'tar format', 'zip', 'pickle'):
        assert jargon not in why, why


def test_every_checkpoint_bad_is_one_line_naming_each_file(tmp_path):
    older, newest = two_checkpoints(tmp_path)
    flip(newest, 12345)
    older.write_bytes(bytes(older.stat().st_size))
    with pytest.raises(CheckpointError, match='no usable checkpoint') as info:
        resume_learner(small_learner(tmp_path))
    message = str(info.value)
    assert '\n' not in message
    assert f'{newest.name}: {MISMATCH}' in message
    assert f'{older.name}: every one of its' in message


def test_a_checkpoint_of_a_newer_format_is_refused_with_its_version(tmp_path):
    manager = CheckpointManager(tmp_path)
    path = manager.save({'v': 1}, 1)
    body = path.read_bytes()[:-TRAILER_SIZE]
    fields = struct.pack('<QI', len(body), 7)
    path.write_bytes(body + hashlib.sha256(body + fields).digest() + fields + b'ARLCKSUM')
    with pytest.raises(DigestError, match='format 7 by a newer version'):
        manager.load(path)


def test_a_checkpoint_from_before_the_checksum_loads_with_a_warning(tmp_path, caplog):
    older, newest = two_checkpoints(tmp_path)
    state = torch.load(newest, weights_only=False)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    newest.write_bytes(buffer.getvalue())  # what the previous version wrote: no record
    fresh = small_learner(tmp_path)
    with caplog.at_level(logging.WARNING, logger='async_rl_ros.core.learning.checkpoint'):
        found = resume_learner(fresh)
    assert found.path == newest and fresh.env_steps == 500 and found.skipped == []
    assert any('before checkpoints carried a checksum' in r.getMessage()
               for r in caplog.records)
    newest.write_bytes(buffer.getvalue()[:3000])  # an old file, cut short: refused
    found = resume_learner(small_learner(tmp_path))
    assert found.path == older and found.skipped[0][1].startswith('truncated or damaged')


def learner_snapshot(learner: Learner) -> tuple:
    state = learner.state_dict()
    tensors = [t.clone() for t in learner.sac.actor.state_dict().values()]
    tensors += [t.clone() for t in learner.sac.critic.state_dict().values()]
    return (learner.env_steps, learner.updates, learner.policy_version,
            float(learner.sac.log_alpha.detach()), tensors, state['normalizer'],
            learner.rng.bit_generator.state)


def assert_same(a: tuple, b: tuple) -> None:
    assert a[:4] == b[:4]
    assert all(torch.equal(x, y) for x, y in zip(a[4], b[4]))
    assert str(a[5]) == str(b[5]) and a[6] == b[6]


@pytest.mark.parametrize('spoil', ['rng_overflow', 'critic_shape', 'counters_missing',
                                   'replay_garbage'])
def test_a_well_formed_but_wrong_checkpoint_is_undone_and_the_older_one_used(tmp_path, spoil):
    _, good = two_checkpoints(tmp_path)
    learner = small_learner(tmp_path)
    state = learner.state_dict()
    learner.env_steps = 700
    if spoil == 'rng_overflow':  # what a flipped bit once made of random.setstate's input
        version, internal, gauss = state['rng']['python']
        state['rng']['python'] = (version, (2 ** 70,) + tuple(internal[1:]), gauss)
    elif spoil == 'critic_shape':  # the actor restores first, then the critic fails
        key = next(iter(state['sac']['critic']))
        state['sac']['critic'][key] = torch.zeros(3, 3)
    elif spoil == 'counters_missing':
        del state['counters']
    else:
        state['replay_buffer'] = {'format': 'npz/1', 'tree': {}, 'arrays': b'not an archive'}
    newest = learner.checkpoints.save(state, 9)
    fresh = small_learner(tmp_path)
    with torch.no_grad():
        for p in fresh.sac.actor.parameters():
            p.add_(1.0)  # differs from every saved actor: a partial restore would show
    before = learner_snapshot(fresh)
    with pytest.raises(RestoreFailed, match='cannot be restored into this learner'):
        restore_learner(fresh, learner.checkpoints.load(newest), newest)
    assert_same(learner_snapshot(fresh), before)
    found = resume_learner(fresh)
    assert found.path == good and fresh.env_steps == 500
    [(path, why)] = found.skipped
    assert path == newest and why.startswith('it loads but cannot be restored'), why
    assert '\n' not in why


def test_a_bad_random_state_changes_no_generator(tmp_path):
    gen = np.random.default_rng(3)
    captured = capture_rng_state({'sampler': gen})
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    bad = dict(captured, numpy=('MT19937', np.zeros(3, np.uint32), 0, 0, 0.0))
    with pytest.raises(ValueError, match="random state 'numpy' cannot be restored"):
        restore_rng_state(bad, {'sampler': gen})
    assert random.random() == random.Random(1).random()  # python's state was not touched
    bad = dict(captured, generators={'sampler': {'bit_generator': 'nonsense'}})
    np.random.seed(2)
    with pytest.raises(ValueError, match="'sampler'"):
        restore_rng_state(bad, {'sampler': gen})
    assert np.random.random() == np.random.RandomState(2).random()
    with pytest.raises(KeyError):
        restore_rng_state(captured, {'other': np.random.default_rng()})
    restore_rng_state(captured, {'sampler': gen})


def test_only_an_intact_content_without_its_record_passes_for_an_old_checkpoint(tmp_path):
    manager = CheckpointManager(tmp_path)
    path = manager.save({'w': torch.arange(3.0)}, 1)
    data = path.read_bytes()
    path.write_bytes(data[:-TRAILER_SIZE])  # the whole record cut off: the content is intact
    assert torch.equal(manager.load(path)['w'], torch.arange(3.0))
    for cut in (1, TRAILER_SIZE - 1, TRAILER_SIZE + 1, TRAILER_SIZE + 22):
        path.write_bytes(data[:-cut])
        with pytest.raises(DigestError, match='^truncated or damaged'):
            manager.load(path)
    assert ckpt_digest.trailer(data[:-TRAILER_SIZE]) == data[-TRAILER_SIZE:]
