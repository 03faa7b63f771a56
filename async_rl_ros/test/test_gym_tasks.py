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
Gymnasium both ways: our tasks as Gymnasium goal-conditioned envs, Gymnasium envs as tasks.

Every task (``reach``, ``gym:PandaReach-v3``, ``gym:PandaPush-v3``) passes Gymnasium's and
SB3's env checkers, flat and through the goal-conditioned dict view; the goal spec's
``compute_reward`` gives ``step()``'s reward on random transitions.
"""

import dataclasses
import pickle
import warnings

from async_rl_ros.core.config import ConfigError, EnvWorkerConfig, SimConfig
from async_rl_ros.envs import display  # importing async_rl_ros.envs registers our ids
from async_rl_ros.envs.factory import evaluation_env
from async_rl_ros.envs.goal_view import GoalDictView, GYM_ENVS, register_envs
from async_rl_ros.envs.gym_task import GymGoalSpec, GymGoalTask
from async_rl_ros.envs.pybullet_backend import PyBulletUR5
from async_rl_ros.envs.tasks import get_task, resolve_task
import gymnasium as gym
from gymnasium.utils.env_checker import check_env as gym_check_env
import numpy as np
import pytest

pytest.importorskip('panda_gym')
sb3_env_checker = pytest.importorskip('stable_baselines3.common.env_checker')

TASKS = ('reach', 'push', 'pick_and_place', 'gym:PandaReach-v3', 'gym:PandaPush-v3')
REACH_ID = 'async_rl_ros/UR5Reach-v0'
POINT_ID = 'async_rl_ros_test/PointGoal-v0'


def _cfg(task: str, **flat) -> EnvWorkerConfig:
    """
    Return the default worker config running ``task``.

    :param task: the task name.
    :param flat: more dotted overrides.
    """
    return EnvWorkerConfig().replace(**{'task.name': task, **flat})


def _flat_env(task: str, **flat):
    """Return the checked task's spec and one of its flat envs."""
    plugin, spec = resolve_task(_cfg(task, **flat))
    return spec, plugin.make_env(_cfg(task, **flat))


def _check(env) -> None:
    """Run Gymnasium's and SB3's env checkers (their advice, as warnings, is not failure)."""
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        gym_check_env(env)
        sb3_env_checker.check_env(env, warn=False)


def _random_transitions(env, steps: int, seed: int = 0):
    """
    Step ``env`` with seeded random actions, resetting at episode ends.

    :returns: ``(next_obs, actions, rewards, infos)`` of every step.
    """
    env.action_space.seed(seed)
    env.reset(seed=seed)
    out = []
    for _ in range(steps):
        action = env.action_space.sample()
        obs, reward, terminated, truncated, info = env.step(action)
        out.append((obs, action, reward, info))
        if terminated or truncated:
            env.reset()
    return [list(column) for column in zip(*out)]


class PointGoalEnv(gym.Env):
    """
    A goal-conditioned point in the plane with actions in ``[0, 2]`` and no ``is_success``.

    Sparse reward (0 within 0.05 of the goal, else -1); the episode never terminates.
    """

    metadata = {'render_modes': []}

    def __init__(self):
        box = gym.spaces.Box(-5.0, 5.0, (2,), np.float32)
        self.observation_space = gym.spaces.Dict(
            {'observation': box, 'achieved_goal': box, 'desired_goal': box})
        self.action_space = gym.spaces.Box(0.0, 2.0, (2,), np.float32)
        self.last_action = None

    def _obs(self):
        return {'observation': self.pos.copy(), 'achieved_goal': self.pos.copy(),
                'desired_goal': self.goal.copy()}

    def reset(self, *, seed=None, options=None):
        """Draw a start and a goal."""
        super().reset(seed=seed)
        self.pos = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        self.goal = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return self._obs(), {}

    def step(self, action):
        """Move by ``0.1 * (action - 1)``."""
        self.last_action = np.array(action)
        self.pos = (self.pos + 0.1 * (np.asarray(action) - 1.0)).astype(np.float32)
        obs = self._obs()
        return obs, float(self.compute_reward(obs['achieved_goal'], self.goal, {})), \
            False, False, {}

    def compute_reward(self, achieved_goal, desired_goal, info):
        """Return 0 within 0.05 of the goal, else -1 (vectorized)."""
        d = np.linalg.norm(np.asarray(achieved_goal) - np.asarray(desired_goal), axis=-1)
        return -(d > 0.05).astype(np.float32)


if POINT_ID not in gym.registry:
    gym.register(id=POINT_ID, entry_point=PointGoalEnv, max_episode_steps=20)


def test_import_registers_our_tasks_once():
    assert REACH_ID in gym.registry and [row.env_id for row in GYM_ENVS][0] == REACH_ID
    assert gym.registry[REACH_ID].max_episode_steps == EnvWorkerConfig().task.max_episode_steps
    assert gym.registry[REACH_ID].max_episode_steps == 100
    assert register_envs() == []  # already registered: left alone, no error


def test_registered_reach_passes_both_env_checkers():
    env = gym.make(REACH_ID)
    try:
        assert isinstance(env.unwrapped, GoalDictView)
        assert env.spec.max_episode_steps == 100
        _check(env.unwrapped)
    finally:
        env.close()


@pytest.mark.parametrize('task', TASKS)
def test_flat_env_passes_both_env_checkers(task):
    spec, env = _flat_env(task)
    try:
        assert env.observation_space.shape == (spec.obs_dim,)
        assert env.action_space.shape == (spec.act_dim,)
        assert np.all(env.action_space.low == -1) and np.all(env.action_space.high == 1)
        _check(env)
    finally:
        env.close()


@pytest.mark.parametrize('task', TASKS)
def test_dict_view_passes_both_env_checkers(task):
    spec, env = _flat_env(task)
    view = GoalDictView(env, spec)
    try:
        free = sum(width for name, width in spec.obs_layout if name in spec.goal_free)
        assert view.observation_space['observation'].shape == (free,)
        _check(view)
    finally:
        view.close()


@pytest.mark.parametrize('task', TASKS)
def test_goal_spec_reward_and_success_match_step(task):
    """The flat env's goal spec recomputes every step's reward, success and distance."""
    extra = {'task.action_penalty': 0.1} if task == 'reach' else {}
    spec, env = _flat_env(task, **extra)
    try:
        obs, actions, rewards, infos = _random_transitions(env, 150)
    finally:
        env.close()
    goal, obs = spec.goal, np.asarray(obs)
    achieved, desired = goal.achieved(obs), goal.desired(obs)
    got = goal.compute_reward(achieved, desired, {'action': np.asarray(actions)})
    np.testing.assert_allclose(got, rewards, rtol=0, atol=1e-5)
    # Relabeled with the goal it reached, every step succeeds and scores at least as well.
    reached = goal.compute_reward(achieved, achieved, {'action': np.asarray(actions)})
    assert goal.is_success(achieved, achieved).all()
    assert np.all(reached >= got - 1e-9) and np.any(reached > got)
    success = goal.is_success(achieved, desired)
    assert success.tolist() == [info['is_success'] for info in infos]
    distance = np.linalg.norm(achieved.astype(np.float64) - desired, axis=1)
    np.testing.assert_allclose(distance, [info['distance'] for info in infos], atol=1e-5)
    # A relabeled goal is written where desired() reads it.
    goals = achieved[::-1]
    np.testing.assert_array_equal(goal.desired(goal.with_goal(obs, goals)), goals)


@pytest.mark.parametrize('task', TASKS)
def test_dict_view_compute_reward_matches_step(task):
    """Batched as SB3's HerReplayBuffer calls it, single as Gymnasium's GoalEnv does."""
    extra = {'task.action_penalty': 0.1} if task == 'reach' else {}
    spec, env = _flat_env(task, **extra)
    view = GoalDictView(env, spec)
    try:
        obs, _, rewards, infos = _random_transitions(view, 150, seed=1)
        for o, reward, info in zip(obs, rewards, infos):
            assert view.compute_reward(o['achieved_goal'], o['desired_goal'], info) == reward
        achieved = np.stack([o['achieved_goal'] for o in obs])
        desired = np.stack([o['desired_goal'] for o in obs])
        batched = view.compute_reward(achieved, desired, np.array(infos))
        np.testing.assert_array_equal(batched, rewards)
        np.testing.assert_array_equal(view.compute_reward(achieved, desired, infos), rewards)
        # ... and equals the task env's own reward, up to the goals' float32 rounding.
        np.testing.assert_allclose(rewards, [i['task_reward'] for i in infos], atol=1e-5)
        if task == 'reach':  # the action penalty is part of it: without the action, less
            no_action = [{k: v for k, v in i.items() if k != 'action'} for i in infos]
            with pytest.raises(ValueError, match='action'):
                view.compute_reward(achieved, desired, no_action)
    finally:
        view.close()


def test_registered_reach_takes_config_overrides():
    env = gym.make(REACH_ID, **{'task.action_penalty': 0.5})
    try:
        assert env.unwrapped.goal.task.action_penalty == 0.5
        obs, _ = env.reset(seed=0)
        action = np.ones(3, dtype=np.float32)
        obs, reward, _, _, info = env.step(action)
        no_penalty = env.unwrapped.compute_reward(
            obs['achieved_goal'], obs['desired_goal'], {**info, 'action': 0 * action})
        assert reward == pytest.approx(no_penalty - 0.5 * 3)
    finally:
        env.close()


def test_a_registered_task_runs_its_own_defaults_as_evaluated():
    """
    pick_and_place's view acts at its own 10 Hz (40 steps a 4 s episode), without held starts.

    Its workers start half their episodes with the cube held (``sim.cube_in_gripper``); the
    registered env is the task as an evaluation runs it, and a keyword asks for the starts.
    """
    from async_rl_ros.envs.manipulation_task import REST_HEIGHT

    pick = 'async_rl_ros/UR5PickAndPlace-v0'
    assert gym.registry[pick].max_episode_steps == 40
    assert gym.registry['async_rl_ros/UR5Push-v0'].max_episode_steps == 40  # 10 Hz too
    assert gym.registry['async_rl_ros/UR5Reach-v0'].max_episode_steps == 100  # 25 Hz

    def held_starts(env):
        lifted = []
        for seed in range(20):
            obs, _ = env.reset(seed=seed)
            lifted.append(bool(obs['achieved_goal'][2] > REST_HEIGHT + 0.02))  # the cube
        return sum(lifted)

    env = gym.make(pick)
    try:
        cfg = env.unwrapped.env.cfg
        assert cfg.task.control_hz == 10.0 and cfg.sim.cube_in_gripper == 0.0
        assert held_starts(env) == 0
    finally:
        env.close()
    env = gym.make(pick, **{'sim.cube_in_gripper': 0.5})
    try:
        assert 3 <= held_starts(env) <= 17
    finally:
        env.close()


@pytest.mark.parametrize('make', [
    lambda: gym.make(REACH_ID, render_mode='rgb_array'),
    lambda: GymGoalTask('PandaReach-v3').make_env(EnvWorkerConfig(), render_mode='rgb_array'),
], ids=['reach', 'gym:PandaReach-v3'])
def test_rgb_array_render_needs_no_display(make, monkeypatch):
    monkeypatch.delenv('DISPLAY', raising=False)
    env = make()
    try:
        env.reset(seed=0)
        frame = env.render()
        assert frame.ndim == 3 and frame.shape[2] == 3 and frame.dtype == np.uint8
        assert min(frame.shape[:2]) > 16 and frame.std() > 0  # a picture, not a blank
    finally:
        env.close()


def test_human_render_is_refused_without_a_display(monkeypatch):
    """A PyBullet GUI without a display hangs: refuse it, and do not advertise it."""
    monkeypatch.delenv('DISPLAY', raising=False)
    monkeypatch.setattr(display.sys, 'platform', 'linux')
    with pytest.raises(ConfigError, match='render_mode'):
        gym.make(REACH_ID, render_mode='human')
    with pytest.raises(ConfigError, match='render_mode'):
        GymGoalTask('PandaReach-v3').make_env(EnvWorkerConfig(), render_mode='human')
    env = gym.make(REACH_ID)
    try:
        assert 'human' not in env.metadata['render_modes']
        assert 'rgb_array' in env.metadata['render_modes']
    finally:
        env.close()


def test_a_simulator_window_is_refused_without_a_display_and_evaluations_open_none(
        monkeypatch):
    """sim.gui, for every task, is refused before a process opens a window (and hangs)."""
    monkeypatch.delenv('DISPLAY', raising=False)
    monkeypatch.setattr(display.sys, 'platform', 'linux')
    for task in ('reach', 'push', 'gym:PandaReach-v3'):
        cfg = EnvWorkerConfig().replace(**{'task.name': task, 'sim.gui': True})
        with pytest.raises(ConfigError, match=r'^sim.gui = True .*\$DISPLAY is not set'):
            resolve_task(cfg)
    with pytest.raises(ConfigError, match='^sim.gui'):  # the simulator, built directly
        PyBulletUR5(SimConfig(gui=True), 0.04)
    # a gym: task opens its window as render_mode='human' does
    with pytest.raises(ConfigError, match="render_mode = 'human'"):
        GymGoalTask('PandaReach-v3').make_env(EnvWorkerConfig().replace(**{'sim.gui': True}))
    # The evaluator's env of such a run opens none, so it is built here too.
    env, _ = evaluation_env(EnvWorkerConfig().replace(**{'sim.gui': True}))
    try:
        assert env.unwrapped.backend.gui is False
    finally:
        env.close()


def test_gym_task_refuses_a_physical_arm():
    cfg = dataclasses.replace(_cfg('gym:PandaReach-v3'), backend='ur5')
    with pytest.raises(ConfigError) as err:
        resolve_task(cfg)
    assert err.value.key == 'backend' and 'simulated' in str(err.value)
    assert not get_task('gym:PandaReach-v3').spec(cfg).real_arm


@pytest.mark.parametrize('name, says', [
    ('gym:NoSuchEnv-v0', 'gym:MODULE:NoSuchEnv-v0'),
    ('gym:no_such_module:PandaReach-v3', 'no_such_module'),
    ('gym:CartPole-v1', 'goal-conditioned'),
])
def test_gym_task_refuses_what_it_cannot_run(name, says):
    with pytest.raises(ConfigError) as err:
        resolve_task(_cfg(name))
    assert err.value.key == 'task.name' and err.value.value == name
    message = str(err.value)
    assert says in message and '\n' not in message


def test_module_prefix_imports_the_provider():
    plugin, spec = resolve_task(_cfg('gym:panda_gym:PandaPickAndPlace-v3'))
    assert plugin.name == 'gym:panda_gym:PandaPickAndPlace-v3'
    # panda-gym's gripper, when not blocked, is the last action entry.
    assert spec.act_layout == (('arm', 3), ('gripper', 1))


def test_panda_spec_reads_the_env():
    spec = get_task('gym:PandaPush-v3').spec(EnvWorkerConfig())
    assert spec.obs_layout == (('observation', 18), ('achieved_goal', 3), ('desired_goal', 3))
    assert spec.act_layout == (('arm', 3),)  # PandaPush blocks the gripper
    assert spec.goal_free == ('observation',) and spec.rank.key == 'distance'
    assert spec.goal.terminate_on_success  # panda-gym v3 ends an episode on success
    assert not spec.real_arm


def test_goal_spec_pickles_without_its_env():
    spec = get_task('gym:PandaReach-v3').spec(EnvWorkerConfig())
    goal = spec.goal
    goal.compute_reward(np.zeros((1, 3)), np.zeros((1, 3)), {})  # builds its env
    assert goal.env is not None
    copy = pickle.loads(pickle.dumps(spec))
    assert isinstance(copy.goal, GymGoalSpec) and copy.goal == goal
    assert copy.goal.__dict__['_env'] is None  # the simulator stayed behind
    a, d = np.zeros((2, 3)), np.array([[0.0, 0.0, 0.01], [0.0, 0.0, 1.0]])
    assert copy.goal.compute_reward(a, d, {}).tolist() == [0.0, -1.0]
    assert copy.goal.is_success(a, d).tolist() == [True, False]


def test_seeded_runs_repeat_over_episodes():
    """
    Two new envs given one seed (first reset only, as workers do) step through equal episodes.

    panda-gym alone draws an unseeded generator on every ``reset()``: its second episode would
    differ.
    """
    def run():
        _, env = _flat_env('gym:PandaPush-v3')
        try:
            return _random_transitions(env, 120, seed=5)
        finally:
            env.close()

    (obs_a, _, rewards_a, _), (obs_b, _, rewards_b, _) = run(), run()
    np.testing.assert_array_equal(obs_a, obs_b)
    assert rewards_a == rewards_b
    goals = {tuple(o[-3:]) for o in obs_a}
    assert len(goals) >= 3  # 120 steps of 50-step episodes: three different goals


def test_any_goal_env_is_flattened_and_normalized():
    """Actions rescaled from [-1, 1] to the env's bounds; success by the sparse convention."""
    plugin, spec = resolve_task(_cfg('gym:' + POINT_ID))
    assert spec.act_layout == (('action', 2),) and not spec.goal.terminate_on_success
    env = plugin.make_env(_cfg('gym:' + POINT_ID))
    try:
        _check(env)
        obs, info = env.reset(seed=0)
        np.testing.assert_array_equal(obs[2:4], obs[0:2])  # achieved = the point
        inner = env.env.unwrapped
        env.step(np.array([-1.0, 0.0]))
        np.testing.assert_allclose(inner.last_action, [0.0, 1.0])
        env.step(np.array([1.0, 5.0]))  # clipped to the bounds
        np.testing.assert_allclose(inner.last_action, [2.0, 2.0])
        goal = inner.goal
        _, reward, _, _, info = env.step(np.zeros(2))
        assert info['is_success'] == (reward == 0.0) and 'distance' in info
        assert spec.goal.is_success(goal[None], goal[None]).tolist() == [True]
        assert spec.goal.is_success(goal[None], goal[None] + 1).tolist() == [False]
    finally:
        env.close()
