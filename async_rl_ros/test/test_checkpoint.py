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

"""Tests of atomic checkpoints, including a writer killed at random instants."""

from __future__ import annotations

import logging
import os
import pathlib
import random
import signal
import subprocess
import sys
import time

from async_rl_ros.core.config import TaskConfig
from async_rl_ros.core.learning.checkpoint import (capture_rng_state, CheckpointConfig,
                                                   CheckpointManager, pack_replay_buffer,
                                                   restore_rng_state, unpack_replay_buffer)
import numpy as np
import pytest
import torch
from torch import nn

torch.set_num_threads(1)


class FakeReplay:
    """A replay buffer with a nested state dict like the project's prioritized buffer."""

    def __init__(self, capacity=1000, seed=0):
        self.rng = np.random.default_rng(seed)
        self.obs = self.rng.normal(size=(capacity, 20)).astype(np.float32)
        self.reward = np.zeros(capacity, np.float32)
        self.done = np.zeros(capacity, bool)
        self.ptr = 17
        self.tree = np.arange(8, dtype=np.float64)

    def state_dict(self):
        """Return contents, cursors, generator state and config."""
        return {'storage': {'obs': self.obs, 'reward': self.reward, 'done': self.done,
                            'cursor': self.ptr, 'size': np.int64(200)},
                'sampler': {'sum_tree': {'capacity': 4, 'tree': self.tree},
                            'max_td': np.float32(1.5), 'rng': self.rng.bit_generator.state,
                            'shape': (3, 4), 'ids': [np.arange(3), None]},
                'config': {'name': 'per', 'alpha': 0.6, 'enabled': True}}

    def load_state_dict(self, state):
        """Restore what state_dict returned."""
        storage, sampler = state['storage'], state['sampler']
        self.obs, self.reward, self.done = storage['obs'], storage['reward'], storage['done']
        self.ptr = int(storage['cursor'])
        self.tree = sampler['sum_tree']['tree']
        self.rng.bit_generator.state = sampler['rng']


def learner_state(seed=0):
    torch.manual_seed(seed)
    actor = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 12))
    log_alpha = torch.tensor([-1.5], requires_grad=True)
    opt = torch.optim.Adam(list(actor.parameters()) + [log_alpha], lr=3e-4)
    actor(torch.randn(4, 20)).sum().backward()
    opt.step()
    return actor, log_alpha, opt


def test_checkpoints_go_to_the_run_folder_unless_a_directory_is_configured(tmp_path):
    manager = CheckpointManager.from_config(CheckpointConfig(), tmp_path / 'run')
    assert manager.directory == tmp_path / 'run' / 'checkpoints'
    named = CheckpointManager.from_config(CheckpointConfig(directory=str(tmp_path / 'ck')),
                                          tmp_path / 'run')
    assert named.directory == tmp_path / 'ck'


def test_round_trip(tmp_path):
    actor, log_alpha, opt = learner_state()
    replay = FakeReplay()
    manager = CheckpointManager.from_config(
        CheckpointConfig(directory=str(tmp_path / 'ckpt'), keep_last=2), tmp_path / 'run')
    state = {
        'actor': actor.state_dict(),
        'actor_optim': opt.state_dict(),
        'log_alpha': log_alpha.detach(),
        'obs_normalizer': {'mean': np.arange(20.0), 'var': np.ones(20), 'count': 123.0},
        'counters': {'updates': 1234, 'env_steps': 56789},
        'rng': capture_rng_state(),
        'config': TaskConfig().to_flat(),
    }
    path = manager.save(state, 1234, replay_buffer=replay)
    assert path.name == 'ckpt_000001234.pt'
    assert manager.list() == [path] and manager.latest() == path

    loaded = manager.load()
    assert loaded['checkpoint']['step'] == 1234
    actor2, log_alpha2, opt2 = learner_state(seed=1)
    actor2.load_state_dict(loaded['actor'])
    opt2.load_state_dict(loaded['actor_optim'])
    with torch.no_grad():
        log_alpha2.copy_(loaded['log_alpha'])
    for a, b in zip(actor.parameters(), actor2.parameters()):
        assert torch.equal(a, b)
    assert torch.equal(log_alpha, log_alpha2)
    for i, s in opt.state_dict()['state'].items():
        for k, v in s.items():
            assert torch.equal(v, opt2.state_dict()['state'][i][k])
    np.testing.assert_array_equal(loaded['obs_normalizer']['mean'], np.arange(20.0))
    assert loaded['counters'] == {'updates': 1234, 'env_steps': 56789}
    assert loaded['config'] == TaskConfig().to_flat()
    assert TaskConfig.from_flat(loaded['config']) == TaskConfig()

    unpacked = unpack_replay_buffer(loaded['replay_buffer'])
    restored = FakeReplay(seed=5)
    restored.load_state_dict(unpacked)
    np.testing.assert_array_equal(restored.obs, replay.obs)
    np.testing.assert_array_equal(restored.tree, replay.tree)
    assert restored.ptr == 17
    assert restored.rng.integers(0, 10**9, 4).tolist() == replay.rng.integers(0, 10**9, 4).tolist()
    assert unpacked['storage']['size'] == 200 and unpacked['sampler']['max_td'] == 1.5
    assert unpacked['sampler']['shape'] == (3, 4)
    np.testing.assert_array_equal(unpacked['sampler']['ids'][0], np.arange(3))
    assert unpacked['sampler']['ids'][1] is None
    assert unpacked['config'] == {'name': 'per', 'alpha': 0.6, 'enabled': True}
    assert len(loaded['replay_buffer']['arrays']) < replay.obs.nbytes  # compressed


@pytest.mark.parametrize('value', [np.array([object()]), object(), {1, 2}])
def test_pack_replay_buffer_rejects_what_cannot_load_safely(value):
    class Bad:

        def state_dict(self):
            return {'inner': {'x': value}}

    with pytest.raises(TypeError, match='inner.x'):
        pack_replay_buffer(Bad())
    with pytest.raises(ValueError):
        unpack_replay_buffer({'format': 'pickle', 'tree': {}, 'arrays': b''})


def test_keep_last_k(tmp_path):
    manager = CheckpointManager(tmp_path, keep_last=3)
    for step in [1, 2, 3, 10, 20, 100, 1000]:
        manager.save({'step': step}, step)
    assert [p.name for p in manager.list()] == [
        'ckpt_000000020.pt', 'ckpt_000000100.pt', 'ckpt_000001000.pt']
    assert manager.load()['step'] == 1000
    assert manager.load(manager.list()[0])['step'] == 20
    assert sorted(os.listdir(tmp_path)) == [p.name for p in manager.list()]


def test_rng_state_restore_reproduces_random_numbers(tmp_path):
    gen = np.random.default_rng(7)
    tgen = torch.Generator().manual_seed(3)
    generators = {'sampler': gen, 'torch_sampler': tgen}
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)

    def draw():
        return (random.random(), random.gauss(0, 1), np.random.normal(size=3).tolist(),
                torch.randn(3).tolist(), gen.integers(0, 1000, 5).tolist(),
                torch.rand(2, generator=tgen).tolist())

    captured = capture_rng_state(generators)
    manager = CheckpointManager(tmp_path)
    manager.save({'rng': captured}, 1)
    first = draw()
    restore_rng_state(captured, generators)
    assert draw() == first
    draw()
    restore_rng_state(manager.load()['rng'], generators)
    assert draw() == first
    with pytest.raises(KeyError):
        restore_rng_state(captured, {'other': np.random.default_rng()})


def test_unreadable_newest_checkpoint_is_skipped(tmp_path, caplog):
    manager = CheckpointManager(tmp_path)
    manager.save({'v': 1}, 1)
    good = manager.save({'v': 2}, 2)
    broken = tmp_path / 'ckpt_000000003.pt'
    broken.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with caplog.at_level(logging.WARNING, logger='async_rl_ros.core.learning.checkpoint'):
        assert manager.load()['v'] == 2
    assert 'ckpt_000000003.pt' in caplog.records[-1].getMessage()
    with pytest.raises(Exception):
        manager.load(broken)
    empty = CheckpointManager(tmp_path / 'empty')
    assert empty.latest() is None
    with pytest.raises(FileNotFoundError):
        empty.load()


def test_temporaries_are_ignored_and_cleaned(tmp_path):
    dead = subprocess.Popen([sys.executable, '-c', 'pass'])
    dead.wait()
    stale = tmp_path / f'.ckpt_000000009.pt.{dead.pid}.0badc0de.tmp'
    stale.write_bytes(b'partial')
    garbage = tmp_path / '.ckpt_000000010.pt.tmp'
    garbage.write_bytes(b'partial')
    live = tmp_path / f'.ckpt_000000011.pt.{os.getppid()}.00000000.tmp'
    live.write_bytes(b'someone else is writing')
    manager = CheckpointManager(tmp_path)
    assert manager.list() == [] and manager.latest() is None
    manager.save({'v': 1}, 1)
    assert not stale.exists() and not garbage.exists()
    assert live.exists()  # its writer still runs
    assert [p.name for p in manager.list()] == ['ckpt_000000001.pt']


_WRITER = """
import sys
import torch
from async_rl_ros.core.learning.checkpoint import CheckpointManager
torch.set_num_threads(1)
manager = CheckpointManager(sys.argv[1], keep_last=3)
step = int(sys.argv[2])
base = torch.arange(1_000_000, dtype=torch.float32)  # 4 MB
first = True
while True:
    manager.save({'weights': base + step, 'step': step}, step)
    if first:
        print('ready', flush=True)
        first = False
    step += 1
"""


def test_killed_writer_never_leaves_a_broken_checkpoint(tmp_path):
    rng = random.Random(20260101)
    manager = CheckpointManager(tmp_path, keep_last=3)
    base = torch.arange(1_000_000, dtype=torch.float32)
    env = dict(os.environ, OMP_NUM_THREADS='1')
    start = time.monotonic()
    for round_ in range(5):
        first_step = round_ * 100_000
        proc = subprocess.Popen([sys.executable, '-c', _WRITER, str(tmp_path), str(first_step)],
                                stdout=subprocess.PIPE, env=env)
        try:
            assert proc.stdout.readline().strip() == b'ready'
            time.sleep(rng.uniform(0.0, 0.4))
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            proc.stdout.close()
        paths = manager.list()
        assert paths, 'the writer saved at least once before it was killed'
        for path in paths:
            state = manager.load(path)
            step = int(path.name[5:14])
            assert state['step'] == step and state['checkpoint']['step'] == step
            assert torch.equal(state['weights'], base + step)
        newest = manager.load()
        assert newest['step'] >= first_step
        assert manager.latest() == paths[-1]
    manager.save({'step': 10**6}, 10**6)
    assert not list(tmp_path.glob('.ckpt_*.tmp'))
    assert len(manager.list()) == 3
    assert time.monotonic() - start < 60.0


# ---------------------------------------------------------------------- resume errors
def small_learner(tmp_path, hidden=(32, 32)):
    from async_rl_ros.core.config import LearnerConfig
    from async_rl_ros.core.learning.learner import Learner
    cfg = LearnerConfig().replace(**{'sac.hidden_sizes': list(hidden),
                                     'batch.initial_batch': 64, 'batch.min_batch': 8,
                                     'replay.capacity': 1000,
                                     'checkpoint.directory': str(tmp_path / 'ckpt')})
    return Learner(cfg, 21, 6)


def test_resume_names_the_corrupt_file_and_the_one_it_loads(tmp_path):
    from async_rl_ros.core.learning.resume import CheckpointError, resume_learner
    learner = small_learner(tmp_path)
    with pytest.raises(CheckpointError, match='no checkpoint to resume from'):
        resume_learner(learner)  # --resume never silently starts afresh
    learner.env_steps = 300
    older = pathlib.Path(learner.save_checkpoint())
    learner.env_steps, learner.updates = 500, 1
    newest = pathlib.Path(learner.save_checkpoint())
    newest.write_bytes(newest.read_bytes()[:1000])  # truncated
    fresh = small_learner(tmp_path)
    found = resume_learner(fresh)
    assert found.path == older and fresh.env_steps == 300
    assert [(p, 'truncated' in why) for p, why in found.skipped] == [(newest, True)]
    newest.write_bytes(b'')
    assert 'empty file (0 bytes)' in resume_learner(small_learner(tmp_path)).skipped[0][1]
    older.write_bytes(b'')
    with pytest.raises(CheckpointError, match='no usable checkpoint') as info:
        resume_learner(small_learner(tmp_path))
    assert older.name in str(info.value) and newest.name in str(info.value)


def test_resume_skips_non_finite_weights_and_refuses_another_architecture(tmp_path):
    from async_rl_ros.core.learning.resume import CheckpointError, resume_learner
    learner = small_learner(tmp_path)
    good = pathlib.Path(learner.save_checkpoint())
    learner.updates = 1
    with torch.no_grad():
        learner.sac.actor.mean_head.weight[0, 0] = float('nan')
    bad = pathlib.Path(learner.save_checkpoint())
    found = resume_learner(small_learner(tmp_path))
    assert found.path == good
    assert found.skipped[0][0] == bad and 'non-finite weights in sac.actor' in found.skipped[0][1]
    with pytest.raises(CheckpointError) as info:
        resume_learner(small_learner(tmp_path, hidden=(64, 64)))
    message = str(info.value)
    assert 'learner.sac.hidden_sizes = [32, 32] in the checkpoint but [64, 64]' in message
    assert '\n' not in message
