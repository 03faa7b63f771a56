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

"""The embedded runner: worker processes, both modes, respawn, clean Ctrl-C."""

import os
import signal
import subprocess
import sys
import threading
import time

from async_rl_ros.core.config import ConfigError, EnvWorkerConfig, LearnerConfig, LocalRunnerConfig
from async_rl_ros.core.learning.evaluation import run_episodes
from async_rl_ros.envs.reach_env import make_reach_env
from async_rl_ros.local.runner import LocalRunner
import numpy as np
import psutil
import pytest
import torch


def configs(tmp_path, mode: str, steps: int, hidden=(32, 32), **runner):
    learner = LearnerConfig().replace(**{
        'sac.hidden_sizes': list(hidden), 'batch.initial_batch': 64, 'batch.min_batch': 8,
        'learning_starts': 256, 'warmup_steps': 256, 'total_env_steps': steps,
        'replay.capacity': 50_000, 'checkpoint.directory': str(tmp_path / 'ckpt')})
    runner = LocalRunnerConfig().replace(mode=mode, num_workers=2, transition_batch=32,
                                         **{'parameter_server.commit_every': 4, **runner})
    return EnvWorkerConfig(), learner, runner


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.mark.parametrize('mode', ['async', 'sync'])
def test_both_modes_learn_publish_and_leave_no_process(tmp_path, mode):
    """Both modes learn a little on a tiny budget (better than random actions)."""
    runner = LocalRunner(*configs(tmp_path, mode, 3000, hidden=(64, 64)))
    episodes = []
    runner.run(on_tick=lambda run: episodes.extend(run.take_episode_metrics()))
    episodes.extend(runner.take_episode_metrics())
    learner = runner.learner
    assert learner.env_steps >= 3000
    assert learner.updates > 0 and learner.policy_version > 0
    assert runner.server.version == learner.policy_version  # commits went through the server
    versions = {int(s['policy_version']) for s in runner.worker_stats.values()}
    assert max(versions) >= 1  # workers decoded the board's packets and act with them
    metrics = runner.metrics()
    assert metrics['transport/rejected_packets'] == 0
    assert metrics['charts/transition_lag_p50'] <= metrics['charts/transition_lag_max']
    if mode == 'sync':
        assert metrics['charts/policy_lag_max'] <= 1.0
        assert metrics['charts/transition_lag_max'] <= 1.0  # lockstep: at most one behind
    assert len(episodes) >= 20  # the workers reported their episodes
    # The trained policy reaches better than random actions on the same 10 episodes.
    env = make_reach_env()
    try:
        trained = run_episodes(env, lambda o: learner.act(o, deterministic=True), 10, seed=7)
        env.action_space.seed(7)
        random = run_episodes(env, lambda o: env.action_space.sample(), 10, seed=7)
    finally:
        env.close()
    assert np.mean(trained.returns) > np.mean(random.returns), (trained.returns, random.returns)
    assert all(not h.process.is_alive() for h in runner.workers.values())


@pytest.mark.parametrize('ratio', [0.25, 1.0])
def test_async_workers_keep_to_the_update_to_data_ratio(tmp_path, ratio):
    """Free-running workers would send 100x what the learner uses; the limit holds them."""
    env_cfg, learner_cfg, runner_cfg = configs(tmp_path, 'async', 2500, rate_limit_slack=300)
    learner_cfg = learner_cfg.replace(updates_per_step=ratio)
    runner = LocalRunner(env_cfg, learner_cfg, runner_cfg)
    runner.run()
    learner = runner.learner
    in_flight = runner.num_workers * runner_cfg.transition_batch  # checked, then one batch
    assert learner.env_steps >= 2500
    starts = 256  # learning_starts: the first update comes after these transitions
    assert learner.updates >= ratio * (learner.env_steps - starts - 300 - in_flight) - 1
    assert learner.updates <= runner_cfg.max_update_ratio * learner.env_steps


def test_rate_limit_slack_zero_lets_workers_run_free(tmp_path):
    runner = LocalRunner(*configs(tmp_path, 'async', 4000, rate_limit_slack=0))
    runner.run()
    assert runner.allowance.value >= 2**62
    assert runner.metrics()['transport/rate_limited'] == 0.0


def test_a_physical_arm_gets_exactly_one_worker(tmp_path):
    _, learner, runner = configs(tmp_path, 'async', 1000)
    real = EnvWorkerConfig().replace(backend='ur5')
    with pytest.raises(ConfigError, match='exactly 1 with backend ur5'):
        LocalRunner(real, learner, runner)


def test_a_killed_worker_is_respawned_and_training_continues(tmp_path):
    runner = LocalRunner(*configs(tmp_path, 'async', 10**9))
    stop = threading.Event()
    thread = threading.Thread(target=runner.run, kwargs={'should_stop': stop.is_set})
    thread.start()
    try:
        deadline = time.monotonic() + 120
        while runner.learner.env_steps < 300 and time.monotonic() < deadline:
            time.sleep(0.1)
        victim = runner.workers[0].process
        victim.kill()
        killed = time.monotonic()
        while runner.respawns == 0 and time.monotonic() - killed < 5.0:
            time.sleep(0.05)
        assert runner.respawns == 1 and time.monotonic() - killed < 5.0
        assert runner.workers[0].process.pid != victim.pid
        steps = runner.learner.env_steps
        while runner.learner.env_steps < steps + 500 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert runner.learner.env_steps >= steps + 500
    finally:
        stop.set()
        thread.join(timeout=60)
    assert not thread.is_alive()
    assert all(not h.process.is_alive() for h in runner.workers.values())


@pytest.mark.skipif(sys.platform == 'win32', reason='POSIX signals')
def test_ctrl_c_stops_every_process_and_writes_a_checkpoint(tmp_path):
    cmd = [sys.executable, '-m', 'async_rl_ros.local.cli', '--mode', 'async', '--workers', '2',
           '--steps', '1000000', '--episodes', '1',
           '--set', 'learner.sac.hidden_sizes=[32, 32]',
           '--set', 'learner.batch.initial_batch=64', '--set', 'learner.learning_starts=256',
           '--set', 'learner.warmup_steps=256',
           '--set', f'learner.log_dir={tmp_path}/run',
           '--set', f'learner.checkpoint.directory={tmp_path}/run/ckpt']
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, OMP_NUM_THREADS='1'))
    parent = psutil.Process(proc.pid)
    deadline = time.monotonic() + 120
    workers = []
    while time.monotonic() < deadline and len(workers) < 2:
        workers = [c for c in parent.children(recursive=True) if 'python' in c.name()]
        time.sleep(0.2)
    time.sleep(8.0)  # let it train a little
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, err  # 128 + SIGINT, after saving
    assert 'Traceback' not in err
    assert 'stopped by SIGINT (Ctrl-C)' in out
    assert list((tmp_path / 'run' / 'ckpt').glob('ckpt_*.pt'))
    time.sleep(0.5)
    assert workers and not [w for w in workers if w.is_running() and w.status() != 'zombie']
