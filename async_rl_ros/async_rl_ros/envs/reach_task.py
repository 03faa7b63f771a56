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
The reach task, independent of what moves the arm: observation, reward, success, targets.

Observation (float32, 21 values, base frame):

====== ================================ =======
slice  content                          unit
====== ================================ =======
0:6    joint positions q                rad
6:12   joint velocities qd              rad/s
12:15  flange position p                m
15:18  target position g                m
18:21  g - p                            m
====== ================================ =======

Action: a flange velocity (3 values, ``task.action: cartesian``, the flange held pointing
down) or six joint velocities (``joint``); see :mod:`~async_rl_ros.envs.cartesian`.

Reward per step: ``-w_d * d + w_s * 0.5 * (1 - tanh(d / s)) - w_a * ||a||^2`` with
``d = ||g - p||`` (m); success when ``d < success_distance``.

:class:`ReachGoalSpec` describes the goal to hindsight relabeling
(:class:`~async_rl_ros.core.tasks.GoalSpec`): the achieved goal is ``p``, a new goal ``g'`` is
written to ``obs[15:18]`` and ``obs[18:21] = g' - p``, and the reward is
:meth:`ReachTask.reward` of the distance between them. The task's plug-in, which builds
its env, is :class:`~async_rl_ros.envs.ur5_tasks.UR5ReachTask`.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from typing import Any, Callable, Mapping

from async_rl_ros.core.config import ConfigError, EnvWorkerConfig, TaskConfig
from async_rl_ros.core.tasks import layout_slices
from async_rl_ros.envs.arm import ArmState
from async_rl_ros.envs.safety import start_fit
from async_rl_ros.envs.ur5_kinematics import JOINT_LIMIT, SPEED_LIMIT
import numpy as np

__all__ = ['OBS_DIM', 'OBS_LOW', 'OBS_HIGH', 'OBS_LAYOUT', 'OBS_SLICES',
           'ReachTask', 'START_TRIES', 'ReachGoalSpec', 'check_starts',
           'MIN_START_FIT', 'START_DRAWS']

OBS_LAYOUT = (('q', 6), ('qd', 6), ('ee_pos', 3), ('target', 3), ('to_target', 3))
OBS_SLICES = layout_slices(OBS_LAYOUT)
OBS_DIM = 21
_Q, _QD, _POS, _DELTA = JOINT_LIMIT + 0.1, 2.0 * SPEED_LIMIT, 2.0, 4.0
OBS_HIGH = np.array([_Q] * 6 + [_QD] * 6 + [_POS] * 6 + [_DELTA] * 3, dtype=np.float32)
OBS_LOW = -OBS_HIGH
#: Draws of ``home_q + noise`` a reset may spend on finding an acceptable start before it
#: falls back to ``home_q``. ``EnvWorkerConfig.check`` refuses settings where fewer than a
#: quarter of the draws fit, so the fallback has a chance below 0.75 ** 64 = 1e-8.
START_TRIES = 64
#: Start-pose check (:func:`check_starts`): at least ``MIN_START_FIT`` of ``START_DRAWS``
#: seeded draws of ``home_q + noise`` must lie within the safety limits.
MIN_START_FIT, START_DRAWS = 50, 200


class ReachTask:
    """Target sampling, observation and reward of the reach task."""

    def __init__(self, cfg: TaskConfig):
        self.cfg = cfg
        self.target_low = np.asarray(cfg.target_low, dtype=np.float64)
        self.target_high = np.asarray(cfg.target_high, dtype=np.float64)
        self.home = np.asarray(cfg.home_q, dtype=np.float64)

    def sample_start(self, rng: np.random.Generator,
                     accept: Callable[[np.ndarray], bool] | None = None) -> np.ndarray:
        """
        Return the home joint positions plus uniform noise (rad), rejection-sampled.

        :param rng: the random generator.
        :param accept: a start must pass this test (e.g. the safety filter's ``pose_ok``:
            within the joint limits and the workspace box); draws that fail are drawn again,
            at most :data:`START_TRIES` times, then ``home_q`` itself is returned.
        """
        noise = self.cfg.home_noise
        if noise > 0:
            for _ in range(START_TRIES):
                q = self.home + rng.uniform(-noise, noise, size=6)
                if accept is None or accept(q):
                    return q
        return self.home.copy()

    def sample_target(self, rng: np.random.Generator) -> np.ndarray:
        """Return a target drawn uniformly from the target box (m)."""
        return rng.uniform(self.target_low, self.target_high)

    def observation(self, state: ArmState, target: np.ndarray) -> np.ndarray:
        """Assemble the observation vector (see the module table); clipped to its bounds."""
        obs = np.empty(OBS_DIM, dtype=np.float32)
        obs[0:6] = state.q
        obs[6:12] = state.qd
        obs[12:15] = state.ee_pos
        obs[15:18] = target
        obs[18:21] = target - state.ee_pos
        return np.clip(obs, OBS_LOW, OBS_HIGH, out=obs)

    def distance(self, state: ArmState, target: np.ndarray) -> float:
        """Return how far (m) the flange is from the target."""
        d = target - state.ee_pos
        return math.sqrt(float(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]))

    def reward(self, distance: float, action: np.ndarray) -> float:
        """Return the step reward for a distance (m) reached after ``action``."""
        cfg = self.cfg
        r = -cfg.distance_weight * distance
        r += cfg.shaping_weight * 0.5 * (1.0 - math.tanh(distance / cfg.shaping_scale))
        if cfg.action_penalty > 0.0:
            a = np.nan_to_num(np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0))
            r -= cfg.action_penalty * float(np.dot(a, a))
        return r

    def success(self, distance: float) -> bool:
        """Return whether the target counts as reached."""
        return distance < self.cfg.success_distance


@dataclasses.dataclass(frozen=True)
class ReachGoalSpec:
    """
    The reach task's goal for hindsight relabeling and the goal-conditioned view.

    Picklable, batch-first, pure. The achieved goal is the flange position ``p``, the desired
    goal the target ``g``; the reward is :meth:`ReachTask.reward`'s, vectorized (the action
    penalty reads ``info['action']``).

    :param task: the task configuration (reward weights, success distance).
    """

    task: TaskConfig

    @property
    def terminate_on_success(self) -> bool:
        """Whether reaching the goal ends the episode."""
        return bool(self.task.terminate_on_success)

    def achieved(self, obs: np.ndarray) -> np.ndarray:
        """Return the flange positions ``obs[:, 12:15]`` (m)."""
        return np.array(np.asarray(obs)[:, OBS_SLICES['ee_pos']], dtype=np.float32)

    def desired(self, obs: np.ndarray) -> np.ndarray:
        """Return the targets ``obs[:, 15:18]`` (m)."""
        return np.array(np.asarray(obs)[:, OBS_SLICES['target']], dtype=np.float32)

    def with_goal(self, obs: np.ndarray, goal: np.ndarray) -> np.ndarray:
        """Return ``obs`` with target ``goal`` and ``goal - flange``, clipped like the env's."""
        out = np.array(obs, dtype=np.float32)
        goal = np.asarray(goal, dtype=np.float32)
        out[:, OBS_SLICES['target']] = goal
        out[:, OBS_SLICES['to_target']] = goal - out[:, OBS_SLICES['ee_pos']]
        return np.clip(out, OBS_LOW, OBS_HIGH, out=out)

    def compute_reward(self, achieved: np.ndarray, desired: np.ndarray,
                       info: Mapping[str, Any] | None = None) -> np.ndarray:
        """
        Return :meth:`ReachTask.reward` of each row (any leading shape, goals last).

        :param info: ``action`` (rows of actions) when ``task.action_penalty`` > 0.
        """
        cfg = self.task
        d = np.linalg.norm(np.asarray(desired, dtype=np.float64)
                           - np.asarray(achieved, dtype=np.float64), axis=-1)
        r = -cfg.distance_weight * d
        r = r + cfg.shaping_weight * 0.5 * (1.0 - np.tanh(d / cfg.shaping_scale))
        if cfg.action_penalty > 0.0:
            action = None if info is None else info.get('action')
            if action is None:
                raise ValueError('the reach reward with task.action_penalty > 0 needs '
                                 "info['action']")
            a = np.nan_to_num(np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0))
            r = r - cfg.action_penalty * np.sum(a * a, axis=-1)
        return r

    def is_success(self, achieved: np.ndarray, desired: np.ndarray) -> np.ndarray:
        """Return whether each flange lies within the success distance of its target."""
        d = np.linalg.norm(np.asarray(desired, dtype=np.float64)
                           - np.asarray(achieved, dtype=np.float64), axis=-1)
        return d < self.task.success_distance


def check_starts(cfg: EnvWorkerConfig, tool_length: float = 0.0,
                 home_key: str = 'task.home_q') -> None:
    """
    Refuse a home pose outside the safety limits, or home noise that almost never fits.

    Resets rejection-sample ``home_q + noise`` (:meth:`ReachTask.sample_start`): at least
    :data:`MIN_START_FIT` of :data:`START_DRAWS` seeded draws must lie within the limits.

    :param tool_length: a tool whose tip must lie in the box too (the gripper's fingertips).
    :param home_key: the option holding the home pose (the cube tasks: ``manipulation.home_q``).
    :raises ConfigError: naming the home pose or ``task.home_noise``.
    """
    home = operator.attrgetter(home_key)(cfg)
    task = dataclasses.replace(cfg.task, home_q=list(home))
    home_ok, fit = start_fit(task, cfg.safety, START_DRAWS, tool_length=tool_length)
    if not home_ok:
        raise ConfigError(home_key, home,
                          'a pose within safety.joint_lower/upper less joint_margin whose '
                          'flange' + (' and fingertips lie' if tool_length else ' lies')
                          + ' in safety.workspace_low/high less workspace_margin')
    if fit < MIN_START_FIT:
        raise ConfigError('task.home_noise', cfg.task.home_noise,
                          f'a noise for which at least {MIN_START_FIT} of {START_DRAWS} '
                          f'starts home_q +- home_noise lie within the safety limits and '
                          f'box, only {fit} do: lower it or widen safety.workspace_*')
