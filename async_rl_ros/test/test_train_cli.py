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

"""``async-rl-train`` trains SAC and leaves every artifact a run should leave behind."""

import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

TINY = ['--set', 'learner.sac.hidden_sizes=[32, 32]', '--set', 'learner.batch.initial_batch=64',
        '--set', 'learner.batch.min_batch=8', '--set', 'learner.learning_starts=100',
        '--set', 'learner.warmup_steps=100', '--set', 'learner.eval_every=0',
        '--set', 'learner.replay.capacity=20000', '--episodes', '2']


def run_cli(tmp_path, *args, **kwargs):
    cmd = [sys.executable, '-m', 'async_rl_ros.local.cli', *TINY,
           '--set', f'learner.log_dir={tmp_path}/run',
           '--set', f'learner.checkpoint.directory={tmp_path}/run/ckpt', *args]
    env = dict(os.environ, OMP_NUM_THREADS='1')
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, **kwargs)


def event_tags(path) -> set[str]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(str(path))
    events.Reload()
    return set(events.Tags()['scalars'])


def test_training_writes_checkpoint_policy_curve_and_tensorboard(tmp_path):
    """The default command trains asynchronously with worker processes."""
    proc = run_cli(tmp_path, '--steps', '400', '--workers', '1')
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    run = tmp_path / 'run'
    assert 'SAC async' in out and 'eval success rate' in out
    assert list((run / 'ckpt').glob('ckpt_*.pt'))
    assert (run / 'learning_curve.png').stat().st_size > 10_000
    events = list((run / 'tensorboard').glob('events.out.tfevents.*'))
    assert events
    tags = event_tags(events[0])
    for tag in ('losses/qf1_loss', 'losses/actor_loss', 'charts/samples_per_s',
                'charts/transition_lag_p50', 'workers/0/steps_per_s', 'charts/episodic_return'):
        assert tag in tags, tag
    policy = torch.jit.load(str(run / 'policy.pt'))
    action = policy(torch.zeros(21))
    assert action.shape == (6,) and bool((action.abs() <= 1).all())


def test_resume_continues_from_the_checkpoint(tmp_path):
    first = run_cli(tmp_path, '--steps', '300', '--mode', 'single')
    assert first.wait(timeout=600) == 0
    second = run_cli(tmp_path, '--steps', '500', '--resume', '--mode', 'single')
    out, err = second.communicate(timeout=600)
    assert second.returncode == 0, err
    assert 'resumed from' in err and 'at 300 env steps' in err
    assert re.search(r'^env steps, updates\s+500, ', out, re.MULTILINE), out


@pytest.mark.skipif(sys.platform == 'win32', reason='POSIX signals')
def test_ctrl_c_writes_a_final_checkpoint_and_exits_cleanly(tmp_path):
    proc = run_cli(tmp_path, '--steps', '1000000', '--mode', 'single')
    deadline = time.time() + 300
    tb = tmp_path / 'run' / 'tensorboard'
    while time.time() < deadline and not list(tb.glob('events.out.tfevents.*')):
        time.sleep(0.5)
    time.sleep(3.0)  # let it train a little
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert 'Traceback' not in err
    assert re.search(r'^stopped early \(Ctrl-C\)\s+yes$', out, re.MULTILINE), out
    checkpoints = sorted(pathlib.Path(tmp_path / 'run' / 'ckpt').glob('ckpt_*.pt'))
    assert checkpoints
    state = torch.load(checkpoints[-1], weights_only=False)
    assert state['counters']['env_steps'] > 0
