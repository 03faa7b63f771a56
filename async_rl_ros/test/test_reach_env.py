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

"""The reach environment: gymnasium contract, observation, reward, seeding."""

import math

from async_rl_ros.core.config import ConfigError, EnvWorkerConfig
from async_rl_ros.envs.factory import check_config
from async_rl_ros.envs.reach_env import make_reach_env, UR5ReachEnv
from async_rl_ros.envs.reach_task import OBS_DIM, OBS_SLICES
from async_rl_ros.envs.scripted import ScriptedReachPolicy
from async_rl_ros.envs.ur5_kinematics import fk, fk_position
from async_rl_ros.envs.ur5_tasks import UR5ReachTask
from gymnasium.utils.env_checker import check_env
import numpy as np
import pytest


@pytest.fixture(scope='module')
def env():
    e = make_reach_env()
    yield e
    e.close()


def test_gymnasium_check_env_passes(env):
    check_env(env, skip_render_check=True)


def test_observation_layout_and_units(env):
    obs, info = env.reset(seed=3)
    assert obs.shape == (OBS_DIM,) and obs.dtype == np.float32
    state = env.state
    np.testing.assert_allclose(obs[OBS_SLICES['q']], state.q, atol=1e-6)
    np.testing.assert_allclose(obs[OBS_SLICES['qd']], 0.0, atol=1e-6)  # at rest after reset
    np.testing.assert_allclose(obs[OBS_SLICES['ee_pos']], fk_position(state.q), atol=1e-5)
    np.testing.assert_allclose(obs[OBS_SLICES['target']], env.target, atol=1e-6)
    np.testing.assert_allclose(obs[OBS_SLICES['to_target']], env.target - state.ee_pos,
                               atol=1e-6)
    low, high = env.cfg.task.target_low, env.cfg.task.target_high
    assert np.all(env.target >= low) and np.all(env.target <= high)
    assert info['distance'] == pytest.approx(np.linalg.norm(env.target - state.ee_pos))


def test_reward_is_negative_distance_plus_tanh_shaping(env):
    env.reset(seed=4)
    _, reward, _, _, info = env.step(np.zeros(3, dtype=np.float32))
    d = info['distance']
    assert reward == pytest.approx(-d + 0.5 * (1.0 - math.tanh(d / 0.1)))
    weighted = make_reach_env(**{'task.distance_weight': 2.0, 'task.shaping_weight': 0.5,
                                 'task.shaping_scale': 0.2, 'task.action_penalty': 0.1})
    weighted.reset(seed=4)
    action = np.full(3, 0.5, dtype=np.float32)
    _, reward, _, _, info = weighted.step(action)
    d = info['distance']
    assert reward == pytest.approx(-2.0 * d + 0.25 * (1.0 - math.tanh(d / 0.2)) - 0.1 * 0.75)
    weighted.close()


def test_episode_length_follows_time_limit_and_rate(env):
    env.reset(seed=5)
    steps, truncated = 0, False
    while not truncated:
        _, _, terminated, truncated, _ = env.step(np.zeros(3))
        assert not terminated
        steps += 1
    assert steps == 100  # 4 s at 25 Hz
    fast = make_reach_env(**{'task.control_hz': 50.0, 'task.episode_seconds': 1.0})
    assert fast.backend.substeps == 10  # 500 Hz physics / 50 Hz control
    fast.reset(seed=0)
    assert sum(1 for _ in iter(lambda: fast.step(np.zeros(3))[3], True)) + 1 == 50
    fast.close()


def test_action_scales_to_fraction_of_speed_limit():
    env = make_reach_env(**{'task.action': 'joint'})
    assert env.action_space.shape == (6,)
    env.reset(seed=6)
    target = np.array([0.25, 0.0, 0.0, 0.0, 0.0, 0.0])
    for _ in range(10):  # the acceleration limit needs a few periods to reach it
        env.step(target)
    # 0.25 * action_scale 0.5 * 3.14 rad/s, as tracked by the joint motor.
    assert env.state.qd[0] == pytest.approx(0.25 * 0.5 * 3.14, abs=1e-3)
    env.close()


def test_a_cartesian_action_moves_the_flange_straight_at_ee_speed(env):
    assert env.action_space.shape == (3,)
    env.reset(seed=6, options={'q': env.cfg.task.home_q})
    start = np.array(fk_position(env.state.q))
    for _ in range(10):  # 0.4 s: the acceleration limit is met in the first periods
        env.step(np.array([0.0, 0.4, -0.2], dtype=np.float32))
    p0 = np.array(fk_position(env.state.q))
    for _ in range(5):
        env.step(np.array([0.0, 0.4, -0.2], dtype=np.float32))
    velocity = (np.array(fk_position(env.state.q)) - p0) / (5 * env.cfg.task.dt)
    np.testing.assert_allclose(velocity, [0.0, 0.1, -0.05], atol=4e-3)  # 0.25 m/s per unit
    assert (p0 - start)[1] > 0.0 and abs((p0 - start)[0]) < 2e-3
    # the flange keeps pointing the way it did at home
    tilt = (fk(np.asarray(env.state.q))[:3, :3].T @ fk(np.asarray(env.cfg.task.home_q))[:3, :3])
    assert np.degrees(np.arccos((np.trace(tilt) - 1.0) / 2.0)) < 1.0


def test_a_cartesian_action_stops_at_the_box_face_without_braking_the_rest(env):
    env.reset(seed=7, options={'q': env.cfg.task.home_q})
    floor = env.safety.box_low[2]
    for _ in range(75):  # 3 s straight down and sideways: the floor is 0.4 m below
        _, _, _, _, info = env.step(np.array([0.0, 0.3, -1.0], dtype=np.float32))
        assert 'workspace' not in info['safety']
    flange = fk_position(env.state.q)
    assert floor < flange[2] < floor + 0.01
    assert flange[1] > fk_position(env.cfg.task.home_q)[1] + 0.15  # still moving sideways


def test_an_action_of_the_wrong_length_is_refused_by_name(env):
    env.reset(seed=8)
    with pytest.raises(ValueError, match='3 values .task.action: cartesian., not 6'):
        env.step(np.zeros(6))


@pytest.mark.parametrize('action', ['cartesian', 'joint'])
def test_a_nan_action_brakes_and_is_counted(action):
    env = make_reach_env(**{'task.action': action})
    env.reset(seed=9)
    for _ in range(5):
        env.step(np.ones(env.action_space.shape, dtype=np.float32))
    _, _, _, _, info = env.step(np.full(env.action_space.shape, np.nan, dtype=np.float32))
    assert 'non_finite' in info['safety']
    env.close()


def test_same_seed_same_trajectory():
    a, b = make_reach_env(), make_reach_env()
    actions = np.random.default_rng(0).uniform(-1, 1, size=(150, 3)).astype(np.float32)

    def rollout(env, seed):
        obs, _ = env.reset(seed=seed)
        trace = [obs]
        for act in actions:
            obs, reward, terminated, truncated, _ = env.step(act)
            trace.append(np.append(obs, reward))
            if terminated or truncated:
                trace.append(env.reset()[0])
        return np.concatenate(trace)

    first = rollout(a, 11)
    np.testing.assert_array_equal(first, rollout(b, 11))
    np.testing.assert_array_equal(first, rollout(a, 11))  # same env, after other episodes
    assert not np.array_equal(first, rollout(b, 12))
    a.close()
    b.close()


@pytest.mark.parametrize('action', ['cartesian', 'joint'])
def test_scripted_controller_reaches_every_target(action):
    env = make_reach_env(**{'task.action': action})
    policy = UR5ReachTask().scripted(env)
    assert policy(env.reset(seed=0)[0]).shape == env.action_space.shape
    for seed in range(5):
        obs, _ = env.reset(seed=100 + seed)
        done = False
        while not done:
            obs, _, terminated, truncated, info = env.step(policy(obs))
            done = terminated or truncated
        assert info['is_success'], info
    env.close()


def test_terminate_on_success_ends_the_episode():
    env = make_reach_env(**{'task.terminate_on_success': True})
    policy = ScriptedReachPolicy(ee_speed=env.cfg.task.ee_speed)
    obs, _ = env.reset(seed=1)
    for step in range(100):
        obs, _, terminated, truncated, info = env.step(policy(obs))
        if terminated:
            break
    assert terminated and info['is_success'] and step < 99
    env.close()


def test_forced_target_and_rgb_render():
    env = make_reach_env(render_mode='rgb_array')
    env.reset(seed=0, options={'target': [-0.4, -0.1, 0.3]})
    np.testing.assert_allclose(env.target, [-0.4, -0.1, 0.3])
    frame = env.render()
    assert frame.shape == (240, 320, 3) and frame.dtype == np.uint8 and frame.std() > 0
    env.close()


def test_bad_settings_are_refused_with_the_key():
    with pytest.raises(ConfigError, match='render_mode'):
        UR5ReachEnv(render_mode='vr')
    with pytest.raises(ConfigError, match='task.home_q'):
        check_config(EnvWorkerConfig().replace(
            **{'task.home_q': [0.0, -1.5708, 0.0, -1.5708, 0.0, 0.0]}))
    home_outside = EnvWorkerConfig()
    home_outside.task.home_q = [0.0, -1.5708, 0.0, -1.5708, 0.0, 0.0]  # not validated
    with pytest.raises(ConfigError, match='task.home_q'):
        UR5ReachEnv(home_outside)


@pytest.mark.parametrize('task', ['reach', 'push'])
def test_a_watched_simulated_arm_steps_at_its_control_rate(monkeypatch, task):
    """
    ``render_mode='human'`` paces the simulator to the wall clock, also after a live change.

    Gymnasium's human mode shows an episode at ``metadata['render_fps']`` (the control rate);
    unpaced, a rendered episode was over in milliseconds. A window is faked here: PyBullet runs
    in DIRECT mode.
    """
    import pybullet

    from async_rl_ros.envs import display
    from async_rl_ros.envs.display import paced_for_watching
    from async_rl_ros.envs.factory import build_env

    cfg = EnvWorkerConfig().replace(**{'task.name': task})
    for mode in (None, 'rgb_array'):
        assert paced_for_watching(cfg, mode) is cfg
    real = cfg.replace(backend='ur5')
    assert paced_for_watching(real, 'human') is real  # a physical arm keeps its own time
    monkeypatch.setattr(display, 'has_display', lambda: True)
    monkeypatch.setattr(pybullet, 'GUI', pybullet.DIRECT)
    env, _ = build_env(cfg, render_mode='human')
    try:
        unwrapped = env.unwrapped
        assert unwrapped.cfg.sim.real_time and unwrapped.backend.real_time
        assert env.metadata['render_fps'] == cfg.task.control_hz
        unwrapped.apply_config(cfg.replace(**{'task.action_scale': 0.5}))  # no real_time in it
        env.reset(seed=0)
        assert unwrapped.cfg.sim.real_time and unwrapped.backend.real_time
    finally:
        env.close()
    headless, _ = build_env(cfg)
    try:
        assert not headless.unwrapped.backend.real_time
    finally:
        headless.close()
