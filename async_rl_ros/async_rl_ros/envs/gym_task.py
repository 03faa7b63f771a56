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
Any Gymnasium goal-conditioned environment as a task (``gym:ID``): simulation only.

A goal-conditioned environment has ``Dict`` observations with the keys ``observation``,
``achieved_goal`` and ``desired_goal`` and a vectorized ``compute_reward(achieved, desired,
info)`` (Gymnasium's ``GoalEnv`` convention; panda-gym, Gymnasium-Robotics' Fetch and hand
tasks). :class:`GymGoalTask` builds it with ``gymnasium.make`` (its registered time limit
included) and flattens it for the learner (:class:`~.gym_flat_env.FlatGoalEnv`):

* observation: ``float32`` ``concat(observation, achieved_goal, desired_goal)``;
* action: ``[-1, 1]^a``, rescaled to the env's own ``Box`` bounds where they differ;
* ``info['distance']``: ``||achieved_goal - desired_goal||`` after the step (the rank metric
  :data:`~async_rl_ros.core.tasks.FINAL_DISTANCE`), ``info['is_success']`` as the env gives
  it, else derived as :meth:`GymGoalSpec.is_success` says.

Ids: a plain id (``PandaPush-v3``) is looked up in Gymnasium's registry; when it is not there,
the known providers (:data:`PROVIDERS`, those installed) are imported and the registry read
again. ``MODULE:ID`` imports ``MODULE`` first, as ``gymnasium.make`` does
(``gym:my_pkg.envs:MyTask-v0``).

Such a task never drives a physical arm: :meth:`GymGoalTask.check` refuses ``backend: ur5``,
and there is no safety filter (``TaskSpec.real_arm`` is ``False``).
"""

from __future__ import annotations

import atexit
import importlib
from typing import Any, Mapping

from async_rl_ros.core.options import ConfigError
from async_rl_ros.core.tasks import FINAL_DISTANCE, TaskSpec
from async_rl_ros.envs.display import check_render_mode
from async_rl_ros.envs.gym_flat_env import FlatGoalEnv, GOAL_KEYS
import gymnasium as gym
import numpy as np

__all__ = ['GymGoalTask', 'GymGoalSpec', 'FlatGoalEnv', 'PROVIDERS', 'GOAL_KEYS',
           'resolve_env_id']

#: Packages that register goal-conditioned environments when imported, tried in this order
#: for an id Gymnasium's registry does not know yet.
PROVIDERS = ('panda_gym', 'gymnasium_robotics')

_PROBES: dict[str, Any] = {}  # env id -> one env per process for spaces and compute_reward


def _import_provider(module: str) -> bool:
    """Import a provider if it is installed; return whether it is."""
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return False
    register = getattr(gym, 'register_envs', None)
    if register is not None:  # Gymnasium >= 1.0: a no-op that marks the import as used
        register(mod)
    return True


def resolve_env_id(env_id: str) -> str:
    """
    Return the registered id of ``env_id`` (``ID`` or ``MODULE:ID``), importing what it needs.

    :raises ConfigError: the module cannot be imported, or no installed provider registers
        the id (key ``task.name``).
    """
    name = 'gym:' + env_id
    module, _, plain = env_id.rpartition(':')
    if not plain:
        raise ConfigError('task.name', name, 'gym:ID or gym:MODULE:ID, e.g. gym:PandaPush-v3')
    registry = gym.registry
    if module:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ConfigError('task.name', name, f'gym:MODULE:ID with an importable MODULE; '
                              f'{module} fails: {exc}') from None
    tried = []
    if plain not in registry:
        for provider in PROVIDERS:
            if _import_provider(provider):
                tried.append(provider)
            if plain in registry:
                break
    if plain not in registry:
        looked = f'after importing {", ".join(tried)}' if tried else (
            f'none of {", ".join(PROVIDERS)} is installed')
        raise ConfigError('task.name', name, f'a Gymnasium id that is registered ({looked}): '
                          f'install the package that registers it and write '
                          f'gym:MODULE:{plain}, or pick one such as gym:PandaPush-v3')
    return plain


def _make(env_id: str, render_mode: str | None = None) -> Any:
    """Build ``env_id`` with ``gymnasium.make`` (its time limit included)."""
    kwargs = {'render_mode': render_mode} if render_mode is not None else {}
    return gym.make(resolve_env_id(env_id), disable_env_checker=True, **kwargs)


def _probe(env_id: str) -> Any:
    """Return this process's probe env of ``env_id`` (built once; spaces, reward, success)."""
    env = _PROBES.get(env_id)
    if env is None:
        if not _PROBES:  # closed before the interpreter tears down what their __del__ needs
            atexit.register(_close_probes)
        env = _PROBES[env_id] = _make(env_id)
    return env


def _close_probes() -> None:
    while _PROBES:
        _, env = _PROBES.popitem()
        try:
            env.close()
        except Exception:  # noqa: B902 -- at exit: nothing left to report to
            pass


def _width(space: Any) -> int:
    return int(np.prod(space.shape, dtype=np.int64))


def _rows_of(info: Mapping[str, Any] | None, n: int) -> np.ndarray:
    """Return per-row info dicts as SB3's ``HerReplayBuffer`` passes them (an object array)."""
    rows = np.empty(n, dtype=object)
    info = info or {}
    for i in range(n):
        rows[i] = {key: value[i] for key, value in info.items()}
    return rows


class GymGoalSpec:
    """
    The goal of a flattened Gymnasium goal-conditioned env (picklable, batch-first).

    Rewards and success come from the env itself: ``compute_reward`` of one env built lazily in
    each process that calls them (dropped when pickled), so a relabeled reward is the env's own.

    Success, in this order: the env's ``task.is_success(achieved, desired)`` (panda-gym); its
    ``_is_success(achieved, desired)`` (Gymnasium-Robotics); else the sparse-reward convention
    of Gymnasium's goal-conditioned envs, where a step that reaches its goal is rewarded 0 and
    any other -1: success is ``compute_reward(...) >= 0`` (wrong for a dense reward, which no
    registered goal-conditioned env without one of the two methods is known to use).

    :param env_id: the id as the task names it (``PandaPush-v3`` or ``MODULE:ID``).
    :param obs_width: width of the ``observation`` part.
    :param goal_width: width of each goal.
    :param terminate_on_success: whether the env ends an episode when its goal is reached.
    """

    def __init__(self, env_id: str, obs_width: int, goal_width: int,
                 terminate_on_success: bool):
        self.env_id = env_id
        self.obs_width = int(obs_width)
        self.goal_width = int(goal_width)
        self.terminate_on_success = bool(terminate_on_success)
        self._env: Any = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state['_env'] = None  # an env (a simulator connection) stays in its process
        return state

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GymGoalSpec) and self.__getstate__() == other.__getstate__()

    def __hash__(self) -> int:
        return hash((self.env_id, self.obs_width, self.goal_width, self.terminate_on_success))

    def __repr__(self) -> str:
        return (f'GymGoalSpec({self.env_id!r}, obs_width={self.obs_width}, '
                f'goal_width={self.goal_width}, '
                f'terminate_on_success={self.terminate_on_success})')

    @property
    def env(self) -> Any:
        """Return the unwrapped env whose ``compute_reward`` this spec calls (built once)."""
        if self._env is None:
            self._env = _probe(self.env_id).unwrapped
        return self._env

    def _part(self, obs: np.ndarray, start: int) -> np.ndarray:
        obs = np.asarray(obs)
        return np.array(obs[:, start:start + self.goal_width], dtype=np.float32)

    def achieved(self, obs: np.ndarray) -> np.ndarray:
        """Return the ``achieved_goal`` part of each flat observation."""
        return self._part(obs, self.obs_width)

    def desired(self, obs: np.ndarray) -> np.ndarray:
        """Return the ``desired_goal`` part of each flat observation."""
        return self._part(obs, self.obs_width + self.goal_width)

    def with_goal(self, obs: np.ndarray, goal: np.ndarray) -> np.ndarray:
        """Return a copy of ``obs`` whose ``desired_goal`` part is ``goal``."""
        out = np.array(obs, dtype=np.float32)
        start = self.obs_width + self.goal_width
        out[:, start:start + self.goal_width] = np.asarray(goal, dtype=np.float32)
        return out

    def compute_reward(self, achieved: np.ndarray, desired: np.ndarray,
                       info: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        """
        Return the env's own ``compute_reward`` of each row, shape ``(n,)``.

        :param info: per-row arrays (``action``...); the env gets them as one dict per row,
            in an object array, as SB3's ``HerReplayBuffer`` passes them.
        """
        achieved = np.asarray(achieved, dtype=np.float32)
        desired = np.asarray(desired, dtype=np.float32)
        n = achieved.shape[0]
        reward = self.env.compute_reward(achieved, desired, _rows_of(info, n))
        return np.broadcast_to(np.asarray(reward, dtype=np.float64).reshape(-1), (n,)).copy()

    def is_success(self, achieved: np.ndarray, desired: np.ndarray) -> np.ndarray:
        """Return whether each achieved goal reaches its desired goal (see the class doc)."""
        achieved = np.asarray(achieved, dtype=np.float32)
        desired = np.asarray(desired, dtype=np.float32)
        n = achieved.shape[0]
        env = self.env
        check = getattr(getattr(env, 'task', None), 'is_success', None)
        if check is None:
            check = getattr(env, '_is_success', None)
        if check is not None:
            out = np.asarray(check(achieved, desired))
        else:
            out = np.asarray(env.compute_reward(achieved, desired, _rows_of(None, n))) >= 0
        return np.broadcast_to(out.astype(bool).reshape(-1), (n,)).copy()


def _check_goal_env(env: Any, name: str) -> None:
    """Refuse an env that is not goal-conditioned or whose actions cannot be normalized."""
    space = env.observation_space
    if not isinstance(space, gym.spaces.Dict) or set(GOAL_KEYS) - set(space.spaces):
        raise ConfigError('task.name', name, 'a goal-conditioned env (Dict observations with '
                          f'{", ".join(GOAL_KEYS)}); it observes {space}')
    if any(not isinstance(space[key], gym.spaces.Box) for key in GOAL_KEYS):
        raise ConfigError('task.name', name, f'a goal-conditioned env of Box parts: {space}')
    if space['achieved_goal'].shape != space['desired_goal'].shape:
        raise ConfigError('task.name', name, 'achieved_goal and desired_goal of one shape')
    if not callable(getattr(env.unwrapped, 'compute_reward', None)):
        raise ConfigError('task.name', name, 'a goal-conditioned env with compute_reward')
    act = env.action_space
    if not (isinstance(act, gym.spaces.Box) and np.all(np.isfinite(act.low))
            and np.all(np.isfinite(act.high))):
        raise ConfigError('task.name', name, f'an env with bounded Box actions, not {act}')


def _terminates_on_success(unwrapped: Any) -> bool:
    """
    Tell whether the env ends an episode when its goal is reached.

    An env's own ``terminate_on_success`` attribute answers; otherwise panda-gym envs do
    (v3: ``terminated = is_success``) and others (Gymnasium-Robotics) do not.
    """
    own = getattr(unwrapped, 'terminate_on_success', None)
    if isinstance(own, (bool, np.bool_)):
        return bool(own)
    return type(unwrapped).__module__.split('.')[0] == 'panda_gym'


def _act_layout(unwrapped: Any, width: int) -> tuple[tuple[str, int], ...]:
    """Return the action layout: arm and gripper where the env tells (panda-gym), else one."""
    block = getattr(getattr(unwrapped, 'robot', None), 'block_gripper', None)
    if isinstance(block, (bool, np.bool_)) and type(unwrapped).__module__.startswith('panda_gym'):
        if block or width < 2:
            return (('arm', width),)
        return (('arm', width - 1), ('gripper', 1))
    return (('action', width),)


class GymGoalTask:
    """
    The task plug-in of one Gymnasium goal-conditioned environment (``gym:ID``).

    :param env_id: ``ID`` or ``MODULE:ID`` (the task name without ``gym:``).
    """

    def __init__(self, env_id: str):
        self.env_id = env_id
        self.name = 'gym:' + env_id
        self._spec: TaskSpec | None = None

    def __repr__(self) -> str:
        return f'GymGoalTask({self.env_id!r})'

    def check(self, cfg: Any) -> None:
        """
        Refuse a physical arm, an unknown id, or an env that is not goal-conditioned.

        :raises ConfigError: one line naming the option and how to fix it.
        """
        if getattr(cfg, 'backend', 'sim') == 'ur5':
            raise ConfigError('backend', cfg.backend, f'sim: task {self.name} is a simulated '
                              'Gymnasium env, with no safety filter and no physical arm')
        _check_goal_env(_probe(self.env_id), self.name)

    def spec(self, cfg: Any = None) -> TaskSpec:
        """Return the spec: layouts read from the env's spaces, its own reward and success."""
        if self._spec is None:
            env = _probe(self.env_id)
            _check_goal_env(env, self.name)
            space = env.observation_space
            n, g = _width(space['observation']), _width(space['achieved_goal'])
            unwrapped = env.unwrapped
            goal = GymGoalSpec(self.env_id, n, g, _terminates_on_success(unwrapped))
            layout = (('observation', n), ('achieved_goal', g), ('desired_goal', g))
            self._spec = TaskSpec(self.name, layout,
                                  _act_layout(unwrapped, _width(env.action_space)), goal,
                                  rank=FINAL_DISTANCE, real_arm=False,
                                  goal_free=('observation',))
        return self._spec

    def make_env(self, cfg: Any = None, *, gate: Any = None,
                 render_mode: str | None = None) -> 'FlatGoalEnv':
        """
        Build one flattened env (``gate`` is ignored: no physical arm behind it).

        Seed it as the workers do, with ``reset(seed=...)``. ``sim.gui`` opens its window as
        it opens the UR5 simulator's: ``render_mode='human'``.
        """
        if render_mode is None and cfg is not None and cfg.sim.gui:
            render_mode = 'human'
        check_render_mode(render_mode)
        spec = self.spec(cfg)
        return FlatGoalEnv(_make(self.env_id, render_mode), spec.goal)
