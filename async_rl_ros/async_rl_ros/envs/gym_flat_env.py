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
A Gymnasium goal-conditioned env flattened as the learner sees every task (``gym:ID``).

:class:`FlatGoalEnv` wraps what ``gymnasium.make`` built (see
:mod:`~async_rl_ros.envs.gym_task`, which makes it):

* observation: ``float32`` ``concat(observation, achieved_goal, desired_goal)``
  (:data:`GOAL_KEYS`);
* action: ``[-1, 1]^a``, rescaled to the env's own ``Box`` bounds where they differ;
* ``info['distance']``: ``||achieved_goal - desired_goal||`` after the step,
  ``info['is_success']`` as the env gives it, else as the task's goal spec says;
* seeded episodes repeat, PyBullet's contact cache included (:func:`_forget_contacts`).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from async_rl_ros.core.tasks import GoalSpec
from async_rl_ros.envs.display import render_modes
import gymnasium as gym
import numpy as np

__all__ = ['FlatGoalEnv', 'GOAL_KEYS']

#: The keys of a goal-conditioned observation, in the order the flat observation lays them.
GOAL_KEYS = ('observation', 'achieved_goal', 'desired_goal')


def _forget_contacts(unwrapped: Any) -> None:
    """
    Drop the contact cache of a panda-gym env's PyBullet simulator (other envs: nothing).

    PyBullet starts each step's contact solve from the impulses of the contacts still cached
    from the step before, across a reset too: the first step of an episode with an object
    (``PandaPush-v3``) then depends on how the previous episode ended (by up to 1e-2 in the
    object's velocity), and Gymnasium's ``check_env`` finds two seeded resets stepping apart.
    Switching the touching pairs' collisions off for one collision pass drops their cache; the
    step after the reset solves its contacts afresh. PyBullet keeps more state than its API
    reaches (an episode of one seed may still differ by about 1e-4 in the object's position
    with what the simulator ran before); a run from a new env with the same seeds repeats.
    """
    client = getattr(getattr(unwrapped, 'sim', None), 'physics_client', None)
    if client is None or not hasattr(client, 'getContactPoints'):
        return
    pairs = {(c[1], c[2], c[3], c[4]) for c in client.getContactPoints()}
    if not pairs:
        return
    for a, b, link_a, link_b in pairs:
        client.setCollisionFilterPair(a, b, link_a, link_b, 0)
    client.performCollisionDetection()
    for a, b, link_a, link_b in pairs:  # they touched: they collide, as before
        client.setCollisionFilterPair(a, b, link_a, link_b, 1)


class FlatGoalEnv(gym.Env):
    """
    A goal-conditioned env seen as the learner sees every task (see the module docstring).

    :param env: the goal-conditioned env (as ``gymnasium.make`` built it).
    :param goal: its goal spec (:class:`~async_rl_ros.envs.gym_task.GymGoalSpec`): success
        where the env's ``info`` lacks it.
    """

    def __init__(self, env: Any, goal: GoalSpec):
        self.env = env
        self.goal = goal
        space = env.observation_space
        self.metadata = dict(getattr(env, 'metadata', None) or {})
        self.metadata['render_modes'] = render_modes(self.metadata.get('render_modes', []))
        self.render_mode = getattr(env, 'render_mode', None)
        low = np.concatenate([np.broadcast_to(space[k].low, space[k].shape).ravel()
                              for k in GOAL_KEYS]).astype(np.float32)
        high = np.concatenate([np.broadcast_to(space[k].high, space[k].shape).ravel()
                               for k in GOAL_KEYS]).astype(np.float32)
        self.observation_space = gym.spaces.Box(low, high, dtype=np.float32)
        act = env.action_space
        self._low = np.asarray(act.low, dtype=np.float64)
        self._high = np.asarray(act.high, dtype=np.float64)
        self._rescale = not (np.all(self._low == -1.0) and np.all(self._high == 1.0))
        self._act_dtype = act.dtype
        self.action_space = gym.spaces.Box(-1.0, 1.0, shape=act.shape, dtype=np.float32)

    def _flat(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        return np.concatenate([np.asarray(obs[k], dtype=np.float32).ravel()
                               for k in GOAL_KEYS])

    def _info(self, obs: Mapping[str, np.ndarray], info: dict[str, Any]) -> dict[str, Any]:
        info = dict(info)
        achieved = np.asarray(obs['achieved_goal'], dtype=np.float64).ravel()
        desired = np.asarray(obs['desired_goal'], dtype=np.float64).ravel()
        info['distance'] = math.sqrt(float(np.dot(achieved - desired, achieved - desired)))
        if 'is_success' in info:
            info['is_success'] = bool(np.asarray(info['is_success']).reshape(-1)[0])
        else:
            info['is_success'] = bool(self.goal.is_success(achieved[None], desired[None])[0])
        return info

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        """
        Reset the env (seeded episodes repeat: see below).

        ``reset()`` without a seed passes the env a seed drawn from this env's generator
        (seeded by the last ``reset(seed=...)``): panda-gym draws a fresh, unseeded generator
        on ``reset(seed=None)``, so its later episodes would not repeat. Contacts cached by a
        PyBullet simulator (panda-gym) are dropped first (see :func:`_forget_contacts`).
        """
        super().reset(seed=seed)
        if seed is None:
            seed = int(self.np_random.integers(2**31 - 1))
        _forget_contacts(self.env.unwrapped)
        obs, info = self.env.reset(seed=seed, options=options)
        return self._flat(obs), self._info(obs, info)

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Step with an action in ``[-1, 1]`` (rescaled to the env's bounds where they differ)."""
        a = np.clip(np.asarray(action, dtype=np.float64).reshape(self.action_space.shape),
                    -1.0, 1.0)
        if self._rescale:
            a = self._low + (a + 1.0) * 0.5 * (self._high - self._low)
        obs, reward, terminated, truncated, info = self.env.step(a.astype(self._act_dtype))
        return (self._flat(obs), float(reward), bool(terminated), bool(truncated),
                self._info(obs, info))

    def render(self) -> Any:
        """Return the env's frame (``rgb_array``) or draw it (``human``)."""
        if self.render_mode is None:
            return None
        return self.env.render()

    def close(self) -> None:
        """Close the env."""
        self.env.close()
