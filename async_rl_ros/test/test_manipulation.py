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

"""The UR5 cube tasks: the gripper holds, the scripts succeed, the fingers stay up."""

import subprocess
import sys

from async_rl_ros.core.config import ConfigError, EnvWorkerConfig
from async_rl_ros.envs.factory import build_env
from async_rl_ros.envs.manipulation_task import CUBE_SIZE, OBS_SLICES, REST_HEIGHT, TABLE_TOP
from async_rl_ros.envs.scripted import ScriptedPickPolicy, ScriptedPushPolicy
from async_rl_ros.envs.tasks import get_task
from async_rl_ros.envs.ur5_kinematics import fk_position
from async_rl_ros.envs.ur5_urdf import FINGERTIP
import gymnasium as gym
import numpy as np
import pytest


def _env(task: str, **flat):
    cfg = EnvWorkerConfig().replace(**{'task.name': task, **flat})
    return get_task(task).make_env(cfg), cfg


@pytest.mark.parametrize('task, script', [('push', ScriptedPushPolicy),
                                          ('pick_and_place', ScriptedPickPolicy)])
def test_a_scripted_oracle_succeeds_on_nine_of_ten_episodes(task, script):
    """Proof that the physics allow the task with the shipped defaults."""
    env, cfg = _env(task)
    policy = script(cfg.task.ee_speed)
    wins, episodes = 0, 30
    for seed in range(episodes):
        obs, info = env.reset(seed=1000 + seed)
        done = False
        while not done:
            obs, _, terminated, truncated, info = env.step(policy(obs))
            done = terminated or truncated
        wins += info['is_success']
    env.close()
    assert wins >= 0.9 * episodes, f'{wins} of {episodes}'


def test_the_fingers_hold_a_lifted_cube():
    env, _ = _env('pick_and_place')
    obs, _ = env.reset(seed=3, options={'cube': [-0.5, -0.1], 'target': [-0.5, -0.1, 0.2]})
    policy = ScriptedPickPolicy(0.25)
    for _ in range(100):
        obs, *_ = env.step(policy(obs))
    cube = obs[OBS_SLICES['cube']]
    assert cube[2] > REST_HEIGHT + 0.1                    # in the air, held
    assert float(obs[OBS_SLICES['width']][0]) == pytest.approx(0.05, abs=0.006)
    env.close()


def test_a_held_start_carries_the_cube_until_the_fingers_open():
    env, _ = _env('pick_and_place')
    obs, _ = env.reset(seed=5, options={'held': True})
    np.testing.assert_allclose(obs[OBS_SLICES['cube']], obs[OBS_SLICES['tcp']], atol=1e-4)
    assert obs[OBS_SLICES['cube']][2] > REST_HEIGHT + 0.02              # in the air
    lift = np.array([0.0, 0.0, 1.0, -1.0], dtype=np.float32)           # up, fingers closed
    for _ in range(30):
        obs, *_ = env.step(lift)
    assert obs[OBS_SLICES['cube']][2] > REST_HEIGHT + 0.15
    assert np.linalg.norm(obs[OBS_SLICES['to_cube']]) < 0.005          # still between the pads
    assert float(obs[OBS_SLICES['width']][0]) == pytest.approx(CUBE_SIZE, abs=0.003)
    for _ in range(30):
        obs, *_ = env.step(np.array([0.0, 0.0, 0.0, 1.0], dtype=np.float32))   # open
    assert obs[OBS_SLICES['cube']][2] == pytest.approx(REST_HEIGHT, abs=0.003)  # on the table
    env.close()


def test_only_a_learning_worker_s_episodes_start_with_the_cube_held():
    """``sim.cube_in_gripper``: a worker's share of held starts; evaluations never hold it."""
    from async_rl_ros.envs.factory import build_worker, check_config, evaluation_env

    cfg = EnvWorkerConfig().replace(**{'task.name': 'pick_and_place',
                                       'sim.cube_in_gripper': 0.5})

    def held(env):
        starts = []
        for seed in range(40):
            obs, _ = env.reset(seed=seed)
            starts.append(bool(obs[OBS_SLICES['cube']][2] > REST_HEIGHT + 0.02))
        env.close()
        return sum(starts)

    assert 10 <= held(build_worker(cfg, 0, [8], 16).env) <= 30
    assert held(build_env(cfg)[0]) == 0
    assert held(evaluation_env(cfg)[0]) == 0
    with pytest.raises(ConfigError) as err:
        check_config(cfg.replace(**{'task.name': 'reach'}))
    assert err.value.key == 'sim.cube_in_gripper'


def test_episodes_start_low_over_the_cube_so_that_exploring_moves_it():
    """From the reach home (0.26 m from the cube) random actions moved it in 0 of 40 episodes."""
    env, _ = _env('push')
    rng = np.random.default_rng(0)
    moved = 0
    for episode in range(20):
        obs, _ = env.reset(seed=episode)
        start = obs[OBS_SLICES['cube']].copy()
        assert fk_position(env.q, FINGERTIP)[2] >= TABLE_TOP + CUBE_SIZE + 0.005   # clear
        assert np.linalg.norm(obs[OBS_SLICES['to_cube']]) < 0.2
        farthest = 0.0
        for _ in range(100):
            obs, *_ = env.step(rng.uniform(-1, 1, env.action_space.shape).astype(np.float32))
            farthest = max(farthest, np.linalg.norm(obs[OBS_SLICES['cube']] - start))
        moved += farthest > 0.01
    env.close()
    assert moved >= 2, f'random actions moved the cube in {moved} of 20 episodes'


@pytest.mark.parametrize('action', ['cartesian', 'joint'])
def test_random_actions_keep_the_fingertips_above_the_table(action):
    env, cfg = _env('push', **{'task.action': action})
    floor = cfg.safety.workspace_low[2] + cfg.safety.workspace_margin
    rng = np.random.default_rng(0)
    lowest = np.inf
    for episode in range(3):
        env.reset(seed=episode)
        for _ in range(100):
            a = rng.uniform(-1, 1, env.action_space.shape)
            a[2 if action == 'cartesian' else 1] = -1.0 if action == 'cartesian' else 1.0
            env.step(a.astype(np.float32))
            lowest = min(lowest, fk_position(env.q, FINGERTIP)[2])
    env.close()
    assert floor - 1e-3 <= lowest < floor + 0.02   # it pressed down and was stopped there


def test_cartesian_action_moves_the_grasp_point_and_holds_the_orientation():
    env, _ = _env('push')
    obs, _ = env.reset(seed=0)
    start = obs[OBS_SLICES['tcp']].copy()
    for _ in range(10):
        obs, *_ = env.step(np.array([0.0, 1.0, 0.0, 1.0], dtype=np.float32))
    moved = obs[OBS_SLICES['tcp']] - start
    assert moved[1] > 0.05 and abs(moved[0]) < 0.01 and abs(moved[2]) < 0.01
    rotation = env.backend.cell().tcp_rot
    assert rotation[:, 2] @ np.array([0.0, 0.0, -1.0]) > 0.999   # still pointing down
    env.close()


def test_the_tasks_are_registered_with_gymnasium_and_relabel_the_cube():
    env = gym.make('async_rl_ros/UR5PickAndPlace-v0')
    obs, _ = env.reset(seed=0)
    assert set(obs) == {'observation', 'achieved_goal', 'desired_goal'}
    np.testing.assert_allclose(obs['achieved_goal'][2], REST_HEIGHT, atol=1e-3)
    far = obs['achieved_goal'] + np.array([0.0, 0.0, 0.2], dtype=np.float32)
    assert env.unwrapped.compute_reward(obs['achieved_goal'], far, {}) == -1.0
    assert env.unwrapped.compute_reward(obs['achieved_goal'], obs['achieved_goal'], {}) == 0.0
    env.close()


@pytest.mark.parametrize('flat, key', [
    ({'manipulation.goal_low': [-0.95, -0.25]}, 'manipulation.goal_low[x]'),
    ({'manipulation.home_q': [0.0, -1.0, 2.6, -1.6, -1.5708, 0.0]}, 'manipulation.home_q'),
    ({'manipulation.goal_height': 0.5, 'safety.workspace_high': [-0.15, 0.35, 0.5]},
     'manipulation.goal_height'),
])
def test_what_the_cell_cannot_do_is_refused_naming_the_key(flat, key):
    cfg = EnvWorkerConfig().replace(**{'task.name': 'pick_and_place', **flat})
    with pytest.raises(ConfigError) as err:
        get_task('pick_and_place').check(cfg)
    assert err.value.key == key


def test_the_cli_runs_each_task_s_scripted_controller():
    cmd = [sys.executable, '-m', 'async_rl_ros.local.cli', '--task', 'pick_and_place',
           '--policy', 'scripted', '--episodes', '3']
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert 'pick_and_place, scripted policy' in result.stdout
    assert 'success rate          100.0 %' in result.stdout
    joint = subprocess.run([*cmd[:-2], '--episodes', '1', '--set', 'task.action=joint'],
                           capture_output=True, text=True, timeout=300)
    assert joint.returncode == 2
    assert 'task.action' in joint.stderr and 'Traceback' not in joint.stderr


def test_the_run_summary_says_the_cube_tasks_filter_their_commands_and_run_on_an_arm():
    cfg = EnvWorkerConfig().replace(**{'task.name': 'push'})
    facts = get_task('push').spec(cfg).describe()
    assert facts['safety_filter'] is True
    assert 'note' not in facts   # no 'simulation only' note: a physical cell runs them too


def test_pressing_into_the_table_still_moves_the_fingers_along_it():
    """A cartesian action into the floor slides along it: the filter need not brake it all."""
    env, _ = _env('push')
    obs, _ = env.reset(seed=0, options={'cube': [-0.6, 0.0]})
    for _ in range(40):   # down onto the box floor
        obs, _, _, _, info = env.step(np.array([0.0, 0.0, -1.0, -1.0], dtype=np.float32))
    start, reasons = obs[OBS_SLICES['tcp']].copy(), set()
    for _ in range(10):   # along -y while still pressing down
        obs, _, _, _, info = env.step(np.array([0.0, -1.0, -1.0, -1.0], dtype=np.float32))
        reasons.update(info['safety'])
    moved = obs[OBS_SLICES['tcp']] - start
    assert moved[1] < -0.05 and abs(moved[2]) < 0.005
    assert 'workspace' not in reasons
    env.close()


def test_a_non_finite_action_stops_the_arm_and_is_counted():
    env, _ = _env('push')
    env.reset(seed=0)
    for _ in range(5):
        env.step(np.array([1.0, 0.0, 0.0, 1.0], dtype=np.float32))
    _, _, _, _, info = env.step(np.array([np.nan, 0.0, 0.0, 1.0], dtype=np.float32))
    assert 'non_finite' in info['safety']
    env.close()


def test_a_live_change_reaches_the_cube_tasks_commands_like_reach():
    """The env worker node's path: a tightened limit from the next step, the rest at reset."""
    cfg = EnvWorkerConfig().replace(**{'task.name': 'push', 'task.action': 'joint'})
    env, _ = build_env(cfg)
    env = env.unwrapped
    commands = []
    step = env.backend.step

    def record(qd):
        commands.append(np.array(qd, dtype=np.float64))
        return step(qd)

    env.backend.step = record
    env.reset(seed=0)
    for _ in range(15):   # past the acceleration ramp
        env.step(np.array([1.0, 0, 0, 0, 0, 0, 1.0]))
    assert abs(commands[-1][0]) > 0.5
    slow = cfg.replace(**{'safety.max_joint_speed': [0.2] * 6, 'manipulation.grip_force': 100.0})
    change = env.apply_config(slow)
    assert change.now == ('safety.max_joint_speed',)
    assert set(change.next_episode) == {'manipulation.grip_force'}
    before = abs(commands[-1][0])
    for _ in range(10):
        env.step(np.array([1.0, 0, 0, 0, 0, 0, 1.0]))
    # braking from the very next step, as fast as the acceleration limit allows, then held
    assert abs(commands[-10][0]) < before
    assert abs(commands[-1][0]) == pytest.approx(cfg.task.action_scale * 0.2)
    assert env.backend.grip_force == 40.0              # the rest waits for the reset
    env.reset(seed=1)
    assert env.backend.grip_force == 100.0
    with pytest.raises(ConfigError, match='read-only'):
        env.apply_config(slow.replace(**{'task.action': 'cartesian'}))
    env.close()
