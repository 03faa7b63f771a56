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
Tasks are plug-ins: the contract, the registry, and a third-party task found by entry point.

The third-party package is written to a temporary folder with a ``dist-info`` that declares
its entry point, exactly as ``pip install`` leaves one: nothing in this repository names it.
"""

import json
import os
import pathlib
import subprocess
import sys
import textwrap

from async_rl_ros.core.config import ConfigError, EnvWorkerConfig
from async_rl_ros.core.param_file import load_yaml_parameters
from async_rl_ros.core.tasks import FINAL_DISTANCE, GoalSpec, RankMetric, Task, TaskSpec
from async_rl_ros.envs.factory import build_env, build_worker
from async_rl_ros.envs.tasks import (BUILTIN_TASKS, ENTRY_POINT_GROUP, get_task, load_sections,
                                     resolve_task, task_defaults, task_names)
from async_rl_ros.envs.ur5_tasks import UR5ReachTask
from async_rl_ros.local.cli import default_config_path
import numpy as np
import pytest

#: A task another package could ship: a point in the plane driven to a goal (no arm at all).
PLUGIN = """
# A point-mass task, registered under the async_rl_ros.tasks entry point group.
import dataclasses

import gymnasium as gym
import numpy as np

from async_rl_ros.core.tasks import FINAL_DISTANCE, TaskSpec


@dataclasses.dataclass(frozen=True)
class PointGoal:
    terminate_on_success: bool = False

    def achieved(self, obs):
        return np.array(obs[:, 0:2])

    def desired(self, obs):
        return np.array(obs[:, 2:4])

    def with_goal(self, obs, goal):
        out = np.array(obs, dtype=np.float32)
        out[:, 2:4] = goal
        return out

    def compute_reward(self, achieved, desired, info):
        return -np.linalg.norm(np.asarray(desired) - np.asarray(achieved), axis=-1)

    def is_success(self, achieved, desired):
        return np.linalg.norm(np.asarray(desired) - np.asarray(achieved), axis=-1) < 0.05


class PointEnv(gym.Env):
    observation_space = gym.spaces.Box(-2.0, 2.0, (4,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = self.np_random.uniform(-1, 1, 2)
        self.goal = self.np_random.uniform(-1, 1, 2)
        self.t = 0
        return self._obs(), {}

    def _obs(self):
        return np.concatenate([self.pos, self.goal]).astype(np.float32)

    def step(self, action):
        self.pos = np.clip(self.pos + 0.1 * np.clip(action, -1, 1), -1, 1)
        self.t += 1
        obs = self._obs()
        goal = PointGoal()
        reward = float(goal.compute_reward(obs[None, 0:2], obs[None, 2:4], {})[0])
        d = float(np.linalg.norm(obs[2:4] - obs[0:2]))
        info = {'is_success': d < 0.05, 'distance': d}
        return obs, reward, False, self.t >= 20, info


class PointTask:
    name = 'point'
    # trains with these where the configuration says nothing
    parameter_defaults = {'learner': {'sac.hidden_sizes': [32, 32], 'total_env_steps': 400}}

    def spec(self, cfg):
        return TaskSpec('point', (('position', 2), ('goal', 2)), (('velocity', 2),),
                        PointGoal(), FINAL_DISTANCE, goal_free=('position',))

    def check(self, cfg):
        pass

    def make_env(self, cfg, *, gate=None, render_mode=None):
        return PointEnv()


class WrongWidth(PointTask):
    def spec(self, cfg):
        return TaskSpec('wrong', (('position', 3), ('goal', 2)), (('velocity', 2),),
                        PointGoal(), FINAL_DISTANCE)


class BadDefaultKey(PointTask):
    parameter_defaults = {'learner': {'sac.hiden_sizes': [32, 32]}}


class BadDefaultNode(PointTask):
    parameter_defaults = {'lerner': {'total_env_steps': 400}}


class MachineDefault(PointTask):  # a transport option is the machine's, not the task's
    parameter_defaults = {'ros_transport': {'metrics_hz': 4.0}}


def in_a_worker():
    import multiprocessing
    return multiprocessing.current_process().name.startswith('env_worker')


class Fragile(PointTask):  # a plug-in bug that shows only in the worker processes
    def make_env(self, cfg, *, gate=None, render_mode=None):
        if in_a_worker():
            raise RuntimeError('a bug in the plug-in')
        return PointEnv()


class Misfit(PointTask):  # a setting only the worker's hardware refuses (as a CB3 does)
    def make_env(self, cfg, *, gate=None, render_mode=None):
        from async_rl_ros.core.config import ConfigError
        if in_a_worker():
            raise ConfigError('rtde.frequency', 500.0, '125 on a CB3 controller')
        return PointEnv()


def not_a_task():
    return object()
"""

ENTRY_POINTS = '\n'.join([f'[{ENTRY_POINT_GROUP}]', 'point = point_task:PointTask',
                          'wrong = point_task:WrongWidth', 'not_a_task = point_task:not_a_task',
                          'bad_key = point_task:BadDefaultKey',
                          'bad_node = point_task:BadDefaultNode',
                          'machine_default = point_task:MachineDefault',
                          'fragile = point_task:Fragile', 'misfit = point_task:Misfit',
                          'missing = point_task_gone:Task', ''])


@pytest.fixture()
def plugin_dir(tmp_path, monkeypatch):
    """Install the point task as a package would be: a module and its dist-info."""
    site = tmp_path / 'site'
    site.mkdir()
    (site / 'point_task.py').write_text(textwrap.dedent(PLUGIN), encoding='utf-8')
    info = site / 'point_task-0.1.dist-info'
    info.mkdir()
    (info / 'METADATA').write_text('Metadata-Version: 2.1\nName: point-task\nVersion: 0.1\n',
                                   encoding='utf-8')
    (info / 'entry_points.txt').write_text(ENTRY_POINTS, encoding='utf-8')
    monkeypatch.syspath_prepend(str(site))
    return site


def test_a_registered_task_is_found_by_name(plugin_dir):
    assert 'point' in task_names() and 'reach' in task_names()
    task, spec = resolve_task(EnvWorkerConfig().replace(**{'task.name': 'point'}))
    assert isinstance(task, Task) and spec.obs_dim == 4 and spec.act_dim == 2
    env, built_spec = build_env(EnvWorkerConfig().replace(**{'task.name': 'point'}))
    assert built_spec == spec
    env.close()
    # It cannot start with an object held: a share of such starts is refused, not ignored.
    with pytest.raises(ConfigError) as err:
        resolve_task(EnvWorkerConfig().replace(**{'task.name': 'point',
                                                  'sim.cube_in_gripper': 0.5}))
    assert err.value.key == 'sim.cube_in_gripper'


def test_bad_plugins_and_unknown_names_are_one_line_errors(plugin_dir):
    with pytest.raises(ConfigError, match=r"^task.name = 'nope' .*reach.*point.*gym:ID"):
        get_task('nope')
    with pytest.raises(ConfigError, match='point_task_gone:Task failed to load'):
        get_task('missing')
    with pytest.raises(ConfigError, match='lacks part of the Task contract'):
        get_task('not_a_task')
    with pytest.raises(ConfigError, match=r'observations \(4,\) .* declares \(5,\)'):
        build_env(EnvWorkerConfig().replace(**{'task.name': 'wrong'}))
    with pytest.raises(ConfigError, match='task.name'):
        EnvWorkerConfig().replace(**{'task.name': ' reach'})
    # a task's parameter_defaults are checked as a file is: key, value and node section
    with pytest.raises(ConfigError, match=r"^parameter_defaults of task 'bad_key': "
                       r"learner.sac.hiden_sizes = .*did you mean 'learner.sac.hidden_sizes'"):
        task_defaults('bad_key')
    with pytest.raises(ConfigError, match=r"^parameter_defaults of task 'bad_node': "
                       r"<node section> = 'lerner' .*one of env_worker, learner\)$"):
        task_defaults('bad_node')
    with pytest.raises(ConfigError, match=r"<node section> = 'ros_transport' .*one of "
                       r'env_worker, learner\)$'):
        task_defaults('machine_default')


def test_a_task_brings_its_own_defaults_and_the_file_and_command_line_win(tmp_path):
    shipped = default_config_path()

    def learner(task, overrides=None, path=shipped):
        loaded = load_sections(path, {'env_worker': {'task.name': task},
                                      'learner': overrides or {}}, ('env_worker', 'learner'))
        assert loaded['env_worker'].task.name == task
        return loaded['learner'].sac.hidden_sizes, loaded['learner'].total_env_steps

    assert learner('reach') == ([128, 128], 20000)  # the dataclass defaults
    assert learner('push') == ([256, 256], 100000)
    assert learner('pick_and_place') == ([256, 256], 500000)
    assert learner('push', {'total_env_steps': 5000}) == ([256, 256], 5000)
    own = tmp_path / 'own.yaml'
    own.write_text('learner:\n  ros__parameters:\n    sac: {hidden_sizes: [64, 64]}\n'
                   'env_worker:\n  ros__parameters:\n    task: {name: push}\n')
    assert learner('push', path=own) == ([64, 64], 100000)  # the file wins, for every task
    pushed = load_sections(own, {}, ('learner',))['learner']  # the task named by the file
    assert pushed.total_env_steps == 100000
    # A task default the shipped file also sets would never apply: the file leaves them out.
    shipped_keys = {node: set(keys) for node, keys in load_yaml_parameters(shipped).items()}
    for name in BUILTIN_TASKS:
        for node, values in task_defaults(name).items():
            assert not shipped_keys.get(node, set()) & set(values), (name, node)

    def acts(task, overrides=None):
        env = load_sections(shipped, {'env_worker': {'task.name': task, **(overrides or {})}},
                            ('env_worker',))['env_worker']
        return env.task.control_hz, env.sim.cube_in_gripper

    assert acts('reach') == (25.0, 0.0)
    assert acts('push') == (10.0, 0.0)  # its own rate, no held starts
    assert acts('pick_and_place') == (10.0, 0.5)  # its own rate and held starts
    assert acts('pick_and_place', {'task.control_hz': 25.0}) == (25.0, 0.5)
    assert acts('push', {'task.control_hz': 25.0}) == (25.0, 0.0)


def test_the_spec_checks_its_layouts():
    goal = UR5ReachTask().spec(EnvWorkerConfig()).goal
    with pytest.raises(ValueError, match='unique'):
        TaskSpec('t', (('a', 1), ('a', 2)), (('arm', 1),), goal)
    with pytest.raises(ValueError, match='>= 1'):
        TaskSpec('t', (('a', 0),), (('arm', 1),), goal)
    with pytest.raises(ValueError, match='goal_free'):
        TaskSpec('t', (('a', 1),), (('arm', 1),), goal, goal_free=('b',))
    with pytest.raises(TypeError, match='GoalSpec'):
        TaskSpec('t', (('a', 1),), (('arm', 1),), object())


def test_the_reach_spec_describes_its_environment():
    cfg = EnvWorkerConfig()
    env, spec = build_env(cfg)
    try:
        assert spec.name == 'reach' and spec.real_arm and isinstance(spec.goal, GoalSpec)
        assert env.observation_space.shape == (spec.obs_dim,) == (21,)
        assert spec.act_slices == {'arm': slice(0, 3)} and env.action_space.shape == (3,)
        joint = UR5ReachTask().spec(cfg.replace(**{'task.action': 'joint'}))
        assert joint.act_slices == {'arm': slice(0, 6)}
        obs, info = env.reset(seed=1)
        s = spec.obs_slices
        np.testing.assert_array_equal(spec.goal.achieved(obs[None])[0], obs[s['ee_pos']])
        np.testing.assert_array_equal(spec.goal.desired(obs[None])[0], obs[s['target']])
        assert spec.rank == FINAL_DISTANCE and spec.rank.key in info
    finally:
        env.close()


def test_the_rank_metric_orders_policies():
    closer = RankMetric('distance', 'final distance', 'm', lower_is_better=True)
    assert closer.score(0.01) > closer.score(0.02) > closer.score(float('nan'))
    assert closer.summary_key == 'eval_final_distance_m'
    higher = RankMetric('height', 'final height', lower_is_better=False)
    assert higher.score(0.2) > higher.score(0.1)
    assert higher.summary_key == 'eval_final_height'


def test_a_worker_of_a_registered_task_stamps_its_rank_metric(plugin_dir):
    built = build_worker(EnvWorkerConfig().replace(**{'task.name': 'point'}), 3, (16, 16), 8)
    metrics = []
    try:
        while not metrics:
            built.worker.step()
            metrics = built.worker.take_episode_metrics()
    finally:
        built.env.close()
    assert 'charts/final_distance' in metrics[0] and built.source == 'sim'


def test_a_registered_task_trains_with_worker_processes_and_exports_a_policy(
        plugin_dir, tmp_path):
    """The whole path with another package's task: CLI, worker processes, HER, export."""
    run = tmp_path / 'run'
    env = dict(os.environ, OMP_NUM_THREADS='1',
               PYTHONPATH=os.pathsep.join([str(plugin_dir), os.environ.get('PYTHONPATH', '')]))
    # the budget and the width are the task's parameter_defaults (400 env steps, [32, 32])
    cmd = [sys.executable, '-m', 'async_rl_ros.local.cli', '--task', 'point', '--mode', 'async',
           '--workers', '1', '--set', 'learner.batch.initial_batch=64',
           '--set', 'learner.batch.min_batch=8', '--set', 'learner.learning_starts=100',
           '--set', 'learner.warmup_steps=100', '--set', 'learner.eval_every=200',
           '--set', 'learner.eval_episodes=2', '--set', 'learner.final_eval_episodes=2',
           '--set', f'learner.log_dir={run}', '--set', f'learner.checkpoint.directory={run}/ck']
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run / 'latest' / 'summary.json').read_text())
    assert summary['task'] == 'point' and summary['obs_dim'] == 4 and summary['act_dim'] == 2
    assert 400 <= summary['env_steps'] < 2000 and summary['updates'] > 0
    assert summary['hidden_sizes'] == [32, 32]
    assert [line.split() for line in result.stdout.splitlines()
            if line.startswith('networks')] == [['networks', '(hidden', 'units)', '[32,', '32]']]
    assert not summary['safety_filter'] and 'simulation only' in summary['note']
    assert summary['eval_episodes'] == 2 and 'eval_final_distance_m' in summary
    assert (run / 'latest' / 'policy.pt').is_file()
    assert (run / 'latest' / 'learning_curve.png').is_file()
    assert 'point (simulation only' in result.stdout


@pytest.mark.parametrize('task, reason, last', [
    ('fragile', 'RuntimeError: a bug in the plug-in',
     'env worker 0 died 3 times in a row before its first transition (the last with exit code '
     '1); its reason is in the lines above'),
    ('misfit', 'env worker 0: configuration error: rtde.frequency = 500.0 is not allowed (125 '
     'on a CB3 controller)',
     'env worker 0 stopped on a failure it cannot recover from (its reason is the line above)'),
])
def test_a_worker_that_cannot_start_ends_the_run_instead_of_respawning_forever(
        plugin_dir, tmp_path, task, reason, last):
    """
    Workers whose env fails in every process: the run ends with one line and exit 3.

    A crash is tried three times (a bug: each try's traceback shows); a configuration the
    worker cannot run, once, in one line.
    """
    run = tmp_path / 'run'
    env = dict(os.environ, OMP_NUM_THREADS='1',
               PYTHONPATH=os.pathsep.join([str(plugin_dir), os.environ.get('PYTHONPATH', '')]))
    cmd = [sys.executable, '-m', 'async_rl_ros.local.cli', '--task', task, '--mode', 'async',
           '--workers', '1', '--set', f'learner.log_dir={run}']
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 3, result.stderr[-3000:]
    assert result.stderr.count(reason) == (3 if task == 'fragile' else 1), result.stderr
    assert ('Traceback' in result.stderr) == (task == 'fragile')
    assert result.stderr.strip().splitlines()[-1] == f'async-rl-train: a worker failed: {last}'
    assert json.loads((run / 'latest' / 'summary.json').read_text())['env_steps'] == 0


def test_an_unknown_task_on_the_command_line_is_one_line_and_exit_2(tmp_path):
    result = subprocess.run([sys.executable, '-m', 'async_rl_ros.local.cli', '--task', 'lift',
                             '--set', f'learner.log_dir={tmp_path}'],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "task.name = 'lift'" in lines[0], result.stderr
    assert not pathlib.Path(tmp_path, 'summary.json').exists()
