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
Scripted controllers of the UR5 tasks: baselines, and checks that a task is solvable as set up.

The reach script is resolved-rate control: a cartesian action is the proportional velocity
``k * (g - p)`` itself; a joint action maps it through damped least squares (Wampler 1986;
Nakamura & Hanafusa 1986), ``qd = J^T (J J^T + lambda^2 I)^-1 * k * (g - p)`` with ``J`` the
3x6 position Jacobian. The cube scripts are stateless sequences of cartesian moves.
"""

from __future__ import annotations

from async_rl_ros.envs.manipulation_task import OBS_SLICES as CUBE_SLICES, REST_HEIGHT
from async_rl_ros.envs.reach_task import OBS_SLICES
from async_rl_ros.envs.ur5_kinematics import position_jacobian
import numpy as np

__all__ = ['ScriptedReachPolicy', 'ScriptedPushPolicy', 'ScriptedPickPolicy']


class ScriptedReachPolicy:
    """
    Map an observation of the reach task to a normalized action towards the target.

    Give ``ee_speed`` for a cartesian action, ``max_speed`` for a joint one.

    :param max_speed: joint speed (rad/s) that a joint action 1.0 stands for in the env.
    :param ee_speed: flange speed (m/s) that a cartesian action 1.0 stands for.
    :param gain: proportional gain on the Cartesian error (1/s).
    :param damping: damping ``lambda`` of the least-squares inverse (m).
    """

    def __init__(self, max_speed: np.ndarray | None = None, ee_speed: float | None = None,
                 gain: float = 4.0, damping: float = 0.05):
        if (max_speed is None) == (ee_speed is None):
            raise ValueError('give max_speed (joint actions) or ee_speed (cartesian ones)')
        self.max_speed = None if max_speed is None else np.asarray(max_speed, dtype=np.float64)
        self.ee_speed = ee_speed
        self.gain = gain
        self.damping = damping

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        """Return the action in [-1, 1]^3 or [-1, 1]^6 that moves the flange to the target."""
        velocity = self.gain * np.asarray(obs[OBS_SLICES['to_target']], dtype=np.float64)
        if self.max_speed is None:
            return np.clip(velocity / self.ee_speed, -1.0, 1.0).astype(np.float32)
        q = np.asarray(obs[OBS_SLICES['q']], dtype=np.float64)
        jac = position_jacobian(q)
        damped = jac @ jac.T + self.damping ** 2 * np.eye(3)
        qd = jac.T @ np.linalg.solve(damped, velocity)  # rad/s
        return np.clip(qd / self.max_speed, -1.0, 1.0).astype(np.float32)


class _CubeScript:
    """Shared geometry of the cube scripts (cartesian actions: 3 velocities, 1 gripper)."""

    def __init__(self, ee_speed: float, gain: float = 8.0):
        self.ee_speed = float(ee_speed)
        self.gain = gain

    def toward(self, here: np.ndarray, there: np.ndarray, grip: float) -> np.ndarray:
        """Return the action that moves the grasp point from ``here`` to ``there``."""
        velocity = np.clip(self.gain * (there - here) / self.ee_speed, -1.0, 1.0)
        return np.array([*velocity, grip], dtype=np.float32)


class ScriptedPushPolicy(_CubeScript):
    """
    Push the cube to its target with closed fingers: go behind it (over the top), then push.

    Stateless: each action follows from the observation alone, so it recovers when the
    cube slips off the line.
    """

    clearance = 0.14  # m: grasp point height while travelling over the cube

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        """Return the cartesian action in [-1, 1]^4 for the push task."""
        s = CUBE_SLICES
        tcp, cube, target = obs[s['tcp']], obs[s['cube']], obs[s['target']]
        line = (target - cube)[:2]
        direction = line / max(float(np.linalg.norm(line)), 1e-6)
        rel = (tcp - cube)[:2]
        along = float(rel @ direction)
        lateral = rel - along * direction
        low = REST_HEIGHT + 0.013  # fingertips just above the box floor: the lower side
        behind = cube[:2] - direction * 0.055
        side = float(np.linalg.norm(lateral))
        if along < -0.02 and tcp[2] < low + 0.02 and side < 0.03:
            # down behind it: push along the line, correcting the sideways offset
            goal = target[:2] - direction * 0.045
            return self.toward(tcp, np.array([*(goal - lateral * 0.5), low]), -1.0)
        if along < -0.03 and side < 0.012:  # behind and in line: come down there first
            return self.toward(tcp, np.array([*behind, low]), -1.0)
        if np.linalg.norm(tcp[:2] - behind) < 0.012:
            return self.toward(tcp, np.array([*behind, low]), -1.0)
        high = max(tcp[2], cube[2] + self.clearance) if along > -0.03 else tcp[2]
        if np.linalg.norm(tcp[:2] - behind) > 0.02 and tcp[2] < cube[2] + 0.08 and along > -0.03:
            return self.toward(tcp, np.array([*tcp[:2], cube[2] + self.clearance]), -1.0)
        return self.toward(tcp, np.array([*behind, high]), -1.0)


class ScriptedPickPolicy(_CubeScript):
    """
    Pick the cube and carry it to its target: above it open, down, close, carry.

    Stateless like :class:`ScriptedPushPolicy`: a dropped cube is picked up again.
    """

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        """Return the cartesian action in [-1, 1]^4 for the pick-and-place task."""
        s = CUBE_SLICES
        tcp, cube, target = obs[s['tcp']], obs[s['cube']], obs[s['target']]
        width = float(obs[s['width']][0])
        offset = cube - tcp
        across = float(np.linalg.norm(offset[:2]))
        yaw = float(obs[s['cube_rot']][2])
        extent = 0.05 * (abs(np.cos(yaw)) + abs(np.sin(yaw)))  # the cube across the fingers
        if across < 0.035 and abs(offset[2]) < 0.04 and width < extent + 0.003:
            # held: lift it, carry it over, put it down there
            if np.linalg.norm((target - cube)[:2]) > 0.02:
                lifted = max(target[2], REST_HEIGHT + 0.04)
                return self.toward(tcp, np.array([*target[:2], lifted]) - offset, -1.0)
            return self.toward(tcp, target - offset, -1.0)
        if tcp[2] - cube[2] < 0.02 and across < 0.025:
            return self.toward(tcp, tcp, -1.0)          # down there: close on it
        if across < 0.01:
            return self.toward(tcp, cube, 1.0)          # above it: go down, open
        above = cube[2] + 0.08
        return self.toward(tcp, np.array([cube[0], cube[1],
                                          max(above, tcp[2]) if across > 0.05 else above]), 1.0)
