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
The tasks that move a cube, ``push`` and ``pick_and_place``: their layout, goal and rules.

Observation (float32, 37 values, base frame):

=========== ======================================= =====
name        content                                 unit
=========== ======================================= =====
q, qd       joint positions and velocities          rad, rad/s
tcp         grasp point between the finger pads     m
tcp_vel     its velocity                            m/s
width       opening between the pads                m
cube        cube centre                             m
cube_rot    cube orientation as a rotation vector   rad
cube_vel    cube velocity                           m/s
cube_spin   cube angular velocity                   rad/s
to_cube     cube - tcp                              m
target      where the cube should go                m
=========== ======================================= =====

Action: ``arm`` (3 values: a grasp-point velocity, ``task.action: cartesian``; or 6 joint
velocities, ``joint``; see :mod:`~async_rl_ros.envs.cartesian`) then ``gripper`` (1 value:
-1 closed, +1 open, the opening between the pads in proportion). The goal
(:class:`CubeGoalSpec`) is the cube's position: success within
``manipulation.success_distance`` of the target (5 cm, the Fetch and panda-gym convention),
the reward sparse (-1 until then, 0) or shaped with the design write-up's
``0.5 * (1 - tanh(d / 0.1))``. The plug-ins, which build the cell, are in
:mod:`~async_rl_ros.envs.ur5_tasks`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from async_rl_ros.core.config import ConfigError, EnvWorkerConfig, ManipulationConfig
from async_rl_ros.core.tasks import FINAL_DISTANCE, layout_slices, TaskSpec
from async_rl_ros.envs.cartesian import ARM_ACT_DIMS
from async_rl_ros.envs.reach_task import check_starts
from async_rl_ros.envs.ur5_urdf import FINGERTIP
import numpy as np

__all__ = ['OBS_LAYOUT', 'OBS_SLICES', 'CubeGoalSpec', 'ManipulationTask', 'GOAL_DRAWS',
           'TABLE_TOP', 'CUBE_SIZE', 'CUBE_MASS', 'REST_HEIGHT', 'CellState']

TABLE_TOP = 0.025   # m above the robot's mounting plane
CUBE_SIZE = 0.05    # m, edge
CUBE_MASS = 0.1     # kg: a wooden 5 cm cube
#: Height (m) of the centre of a cube resting on the table.
REST_HEIGHT = TABLE_TOP + CUBE_SIZE / 2

OBS_LAYOUT = (('q', 6), ('qd', 6), ('tcp', 3), ('tcp_vel', 3), ('width', 1), ('cube', 3),
              ('cube_rot', 3), ('cube_vel', 3), ('cube_spin', 3), ('to_cube', 3),
              ('target', 3))
OBS_SLICES = layout_slices(OBS_LAYOUT)
OBS_DIM = sum(w for _, w in OBS_LAYOUT)
#: Draws a reset may spend on a target farther than the success distance from the cube.
GOAL_DRAWS = 100
_SHAPING_SCALE = 0.1  # m: the design write-up's tanh length scale


@dataclasses.dataclass
class CellState:
    """What the cell shows besides the arm's joints, in the base frame."""

    tcp: np.ndarray           #: grasp point between the pads (m)
    tcp_vel: np.ndarray       #: its velocity (m/s)
    tcp_rot: np.ndarray       #: 3x3 orientation of the tcp frame
    width: float              #: opening between the pads (m)
    cube: np.ndarray          #: cube centre (m)
    cube_quat: np.ndarray     #: cube orientation (x, y, z, w)
    cube_vel: np.ndarray      #: cube linear velocity (m/s)
    cube_spin: np.ndarray     #: cube angular velocity (rad/s)


@dataclasses.dataclass(frozen=True)
class CubeGoalSpec:
    """
    The cube's goal for hindsight relabeling: achieved is the cube, desired the target.

    :param cfg: success distance and reward kind.
    """

    cfg: ManipulationConfig
    terminate_on_success: bool = False

    def achieved(self, obs: np.ndarray) -> np.ndarray:
        """Return the cube positions (m)."""
        return np.array(np.asarray(obs)[:, OBS_SLICES['cube']], dtype=np.float32)

    def desired(self, obs: np.ndarray) -> np.ndarray:
        """Return the targets (m)."""
        return np.array(np.asarray(obs)[:, OBS_SLICES['target']], dtype=np.float32)

    def with_goal(self, obs: np.ndarray, goal: np.ndarray) -> np.ndarray:
        """Return ``obs`` with target ``goal``."""
        out = np.array(obs, dtype=np.float32)
        out[:, OBS_SLICES['target']] = np.asarray(goal, dtype=np.float32)
        return out

    def compute_reward(self, achieved: np.ndarray, desired: np.ndarray,
                       info: Mapping[str, Any] | None = None) -> np.ndarray:
        """Return the reward of each row (any leading shape, goals last)."""
        d = np.linalg.norm(np.asarray(desired, dtype=np.float64)
                           - np.asarray(achieved, dtype=np.float64), axis=-1)
        r = -(d >= self.cfg.success_distance).astype(np.float64)
        if self.cfg.reward == 'shaped':
            r = r + 0.5 * (1.0 - np.tanh(d / _SHAPING_SCALE))
        return r

    def is_success(self, achieved: np.ndarray, desired: np.ndarray) -> np.ndarray:
        """Return whether each cube lies within the success distance of its target."""
        d = np.linalg.norm(np.asarray(desired, dtype=np.float64)
                           - np.asarray(achieved, dtype=np.float64), axis=-1)
        return d < self.cfg.success_distance


class ManipulationTask:
    """
    The rules of a task that moves the cube: its spec, its checks, its targets.

    Subclasses name the task and say whether targets may be in the air
    (:class:`~async_rl_ros.envs.ur5_tasks.UR5PushTask`, ``UR5PickAndPlaceTask``).
    """

    name = ''
    in_air = False

    def spec(self, cfg: EnvWorkerConfig) -> TaskSpec:
        """Describe the task: layouts, the cube's goal, final distance as rank metric."""
        arm = ARM_ACT_DIMS[cfg.task.action]
        goal = CubeGoalSpec(cfg.manipulation, bool(cfg.task.terminate_on_success))
        free = tuple(name for name, _ in OBS_LAYOUT if name != 'target')
        return TaskSpec(self.name, OBS_LAYOUT, (('arm', arm), ('gripper', 1)), goal,
                        FINAL_DISTANCE, real_arm=True, safety_filter=True,
                        goal_free=free)

    def check(self, cfg: EnvWorkerConfig) -> None:
        """Refuse start poses or boxes the fingertips cannot use."""
        check_starts(cfg, tool_length=FINGERTIP, home_key='manipulation.home_q')
        m, box = cfg.manipulation, cfg.safety
        lo = [v + box.workspace_margin for v in box.workspace_low]
        hi = [v - box.workspace_margin for v in box.workspace_high]
        for key, corner in (('object_low', m.object_low), ('object_high', m.object_high),
                            ('goal_low', m.goal_low), ('goal_high', m.goal_high)):
            for i, axis in enumerate('xy'):
                if not lo[i] <= corner[i] <= hi[i]:
                    raise ConfigError(f'manipulation.{key}[{axis}]', corner[i],
                                      f'within the safety box less its margin: [{lo[i]:g}, '
                                      f'{hi[i]:g}]')
        if self.in_air and REST_HEIGHT + m.goal_height > hi[2]:
            raise ConfigError('manipulation.goal_height', m.goal_height,
                              f'at most {hi[2] - REST_HEIGHT:g} (the safety box top)')

    def sample_goal(self, cfg: ManipulationConfig, cube: np.ndarray,
                    rng: np.random.Generator) -> np.ndarray:
        """Draw a target farther than the success distance from the cube's start position."""
        start = goal = np.asarray(cube, dtype=np.float64)
        for _ in range(GOAL_DRAWS):
            xy = rng.uniform(cfg.goal_low, cfg.goal_high)
            z = REST_HEIGHT
            if self.in_air and rng.uniform() < cfg.air_fraction:
                z += rng.uniform(0.0, cfg.goal_height)
            goal = np.array([xy[0], xy[1], z])
            if np.linalg.norm(goal - start) >= cfg.success_distance:
                break
        return goal
