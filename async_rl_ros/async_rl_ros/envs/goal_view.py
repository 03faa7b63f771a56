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
This package's tasks for other libraries: Gymnasium ids and the goal-conditioned dict view.

:class:`GoalDictView` turns the flat env of any task plug-in and its
:class:`~async_rl_ros.core.tasks.TaskSpec` into a Gymnasium goal-conditioned env: ``Dict``
observations (``observation``: the spec's ``goal_free`` entries; ``achieved_goal`` and
``desired_goal``: the goal spec's) and a vectorized ``compute_reward(achieved_goal,
desired_goal, info)`` equal to ``step()``'s reward, so SB3's ``HerReplayBuffer`` and other
libraries train on our tasks unchanged. ``step()`` adds the action to ``info['action']``:
rewards with an action term (the reach task's ``action_penalty``) are recomputed from it.
``step()``'s reward is ``compute_reward`` of the goals the view shows (see
:meth:`GoalDictView.step`).

:func:`register_envs` (run by ``import async_rl_ros.envs``) registers every row of
:data:`GYM_ENVS` with Gymnasium::

    import async_rl_ros.envs  # noqa: F401
    import gymnasium
    env = gymnasium.make('async_rl_ros/UR5Reach-v0', render_mode='rgb_array')

The env runs the task's own ``env_worker`` defaults (``parameter_defaults``: push and
pick_and_place act at 10 Hz) without the training-only ones
(:data:`~async_rl_ros.envs.factory.TRAINING_ONLY`: no held starts), as an evaluation does.
Keyword arguments of ``gymnasium.make`` other than ``render_mode`` override dotted keys of
that configuration (``**{'task.control_hz': 50.0}``, or ``**{'sim.cube_in_gripper': 0.5}``
for a learner's held starts); one that changes the episode length also needs
``max_episode_steps=`` (the registered time limit is the task's default).
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Sequence

from async_rl_ros.core.config import EnvWorkerConfig
from async_rl_ros.core.tasks import TaskSpec
from async_rl_ros.envs.display import check_render_mode, render_modes
from async_rl_ros.envs.factory import TRAINING_ONLY
from async_rl_ros.envs.tasks import get_task, load_sections
import gymnasium as gym
import numpy as np

__all__ = ['GoalDictView', 'GymEnvRow', 'GYM_ENVS', 'register_envs', 'make_goal_env',
           'task_config']


class GymEnvRow(NamedTuple):
    """One Gymnasium registration of a task of this package."""

    env_id: str  #: the Gymnasium id (``async_rl_ros/UR5Reach-v0``)
    task: str    #: the task name (``env_worker.task.name``)


#: The tasks registered with Gymnasium; a new task is one more row.
GYM_ENVS: tuple[GymEnvRow, ...] = (
    GymEnvRow('async_rl_ros/UR5Reach-v0', 'reach'),
    GymEnvRow('async_rl_ros/UR5Push-v0', 'push'),
    GymEnvRow('async_rl_ros/UR5PickAndPlace-v0', 'pick_and_place'),
)


def _box(low: np.ndarray, high: np.ndarray) -> gym.spaces.Box:
    lo, hi = np.minimum(low, high), np.maximum(low, high)
    return gym.spaces.Box(lo.astype(np.float32), hi.astype(np.float32), dtype=np.float32)


def _info_columns(info: Any, n: int, single: bool) -> dict[str, np.ndarray]:
    """
    Return the numeric entries of ``info`` as per-row arrays of ``n`` rows.

    ``info`` is what a caller of ``compute_reward`` holds: one step's dict (``single``), a
    dict of per-row arrays, or one dict per row (a list or an object array, as SB3's
    ``HerReplayBuffer`` passes it).
    """
    if info is None:
        return {}
    if isinstance(info, Mapping):
        if single:
            rows: Sequence[Mapping[str, Any]] = [info]
        else:
            return {k: np.asarray(v) for k, v in info.items()
                    if np.asarray(v).dtype.kind in 'biuf' and np.ndim(v) >= 1
                    and len(v) == n}
    else:
        rows = list(np.asarray(info, dtype=object).reshape(-1))
    if len(rows) != n:
        raise ValueError(f'compute_reward: {len(rows)} info dicts for {n} goals')
    if not rows:
        return {}
    common = set(rows[0]).intersection(*rows[1:])
    out = {}
    for key in sorted(common):
        try:
            value = np.asarray([row[key] for row in rows])
        except ValueError:  # ragged entries (the safety filter's reasons): no reward needs them
            continue
        if value.dtype.kind in 'biuf':
            out[key] = value
    return out


class GoalDictView(gym.Env):
    """
    A flat task env seen as a Gymnasium goal-conditioned env (see the module docstring).

    :param env: an env a task plug-in built (``Task.make_env``).
    :param spec: that task's spec; it needs a goal spec.
    """

    def __init__(self, env: gym.Env, spec: TaskSpec):
        if spec.goal is None:
            raise ValueError(f'task {spec.name!r} has no goal: no goal-conditioned view')
        self.env = env
        self.task_spec = spec
        self.goal = spec.goal
        slices = spec.obs_slices
        self._free = [slices[name] for name in spec.goal_free]
        self.metadata = dict(getattr(env, 'metadata', None) or {})
        self.metadata['render_modes'] = render_modes(self.metadata.get('render_modes', []))
        self.render_mode = getattr(env, 'render_mode', None)
        flat = env.observation_space
        low = np.asarray(flat.low, dtype=np.float32)[None]
        high = np.asarray(flat.high, dtype=np.float32)[None]
        # The goals of the observation bounds: exact where a goal is a slice of the observation
        # (every task of this package and every gym: task).
        self.observation_space = gym.spaces.Dict({
            'observation': _box(self._observation(low[0]), self._observation(high[0])),
            'achieved_goal': _box(self.goal.achieved(low)[0], self.goal.achieved(high)[0]),
            'desired_goal': _box(self.goal.desired(low)[0], self.goal.desired(high)[0]),
        })
        self.action_space = env.action_space

    def _observation(self, flat: np.ndarray) -> np.ndarray:
        if not self._free:
            return np.zeros(0, dtype=np.float32)
        return np.concatenate([np.asarray(flat[s], dtype=np.float32) for s in self._free])

    def observation(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        """Return the dict observation of one flat observation."""
        row = np.asarray(flat, dtype=np.float32)[None]
        return {'observation': self._observation(row[0]),
                'achieved_goal': np.asarray(self.goal.achieved(row)[0], dtype=np.float32),
                'desired_goal': np.asarray(self.goal.desired(row)[0], dtype=np.float32)}

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[dict[str, np.ndarray], dict]:
        """Reset the task env (``seed`` seeds it)."""
        super().reset(seed=seed)
        obs, info = self.env.reset(seed=seed, options=options)
        return self.observation(obs), info

    def step(self, action: np.ndarray
             ) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        """
        Step the task env; ``info['action']`` keeps the action for :meth:`compute_reward`.

        The reward is :meth:`compute_reward` of the goals this view shows (``float32``), so
        that the two agree exactly, as SB3's ``check_env`` and ``HerReplayBuffer`` assume; the
        task env's own reward (``info['task_reward']``) may differ by the rounding of the
        goals to ``float32`` (the reach env scores its ``float64`` state: < 1e-6).
        """
        obs, reward, terminated, truncated, info = self.env.step(action)
        info = dict(info)
        info['action'] = np.array(action, copy=True)
        info['task_reward'] = float(reward)
        view = self.observation(obs)
        reward = self.compute_reward(view['achieved_goal'], view['desired_goal'], info)
        return view, float(reward), bool(terminated), bool(truncated), info

    def compute_reward(self, achieved_goal: np.ndarray, desired_goal: np.ndarray,
                       info: Any) -> np.ndarray | float:
        """
        Return the reward of reaching ``achieved_goal`` when ``desired_goal`` is the goal.

        Vectorized like Gymnasium's ``GoalEnv.compute_reward``: goals of shape ``(n, g)``
        give ``n`` rewards (``info``: one dict per row, or a dict of per-row arrays); one goal
        of shape ``(g,)`` with ``step()``'s ``info`` dict gives that step's reward, a float.
        """
        achieved = np.asarray(achieved_goal, dtype=np.float32)
        desired = np.asarray(desired_goal, dtype=np.float32)
        single = achieved.ndim == 1
        achieved, desired = np.atleast_2d(achieved), np.atleast_2d(desired)
        n = achieved.shape[0]
        columns = _info_columns(info, n, single)
        reward = np.asarray(self.goal.compute_reward(achieved, desired, columns),
                            dtype=np.float64).reshape(n)
        return float(reward[0]) if single else reward

    def render(self) -> Any:
        """Return the task env's frame (``rgb_array``) or draw it (``human``)."""
        return self.env.render()

    def close(self) -> None:
        """Close the task env."""
        self.env.close()


def make_goal_env(task: str, render_mode: str | None = None, **flat: Any) -> GoalDictView:
    """
    Build the goal-conditioned view of task ``task`` (the entry point of :data:`GYM_ENVS`).

    :param task: the task name.
    :param render_mode: Gymnasium's render mode.
    :param flat: dotted ``env_worker`` keys to override (``**{'task.control_hz': 50.0}``).
    """
    check_render_mode(render_mode)
    cfg = task_config(task, **flat)
    plugin = get_task(task)
    plugin.check(cfg)
    spec = plugin.spec(cfg)
    return GoalDictView(plugin.make_env(cfg, render_mode=render_mode), spec)


def task_config(task: str, **flat: Any) -> EnvWorkerConfig:
    """
    Return the ``env_worker`` configuration the view of task ``task`` runs.

    The task's own defaults under ``flat`` (:func:`~async_rl_ros.envs.tasks.load_sections`,
    no file), and the training-only options at their evaluation values where ``flat`` does not
    name them (the view is the task as evaluated).
    """
    cfg = load_sections(None, {'env_worker': {'task.name': task, **flat}},
                        ('env_worker',))['env_worker']
    return cfg.replace(**{key: value for key, value in TRAINING_ONLY.items() if key not in flat})


def _max_episode_steps(task: str) -> int:
    """Return the episode length (steps) of task ``task`` with its own defaults."""
    return task_config(task).task.max_episode_steps


def register_envs() -> list[str]:
    """
    Register every row of :data:`GYM_ENVS` with Gymnasium (idempotent).

    :returns: the ids registered by this call (those already registered are left alone).
    """
    done = []
    for row in GYM_ENVS:
        if row.env_id in gym.registry:
            continue
        gym.register(id=row.env_id, entry_point=f'{__name__}:make_goal_env',
                     kwargs={'task': row.task},
                     max_episode_steps=_max_episode_steps(row.task))
        done.append(row.env_id)
    return done
