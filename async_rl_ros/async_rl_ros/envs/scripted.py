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
A scripted reach controller: a baseline and a check that the task is solvable as configured.

Resolved-rate control with damped least squares (Wampler 1986; Nakamura & Hanafusa 1986):
``qd = J^T (J J^T + lambda^2 I)^-1 * k * (g - p)``, with ``J`` the 3x6 position Jacobian.
"""

from __future__ import annotations

from async_rl_ros.envs.reach_task import OBS_SLICES
from async_rl_ros.envs.ur5_kinematics import position_jacobian
import numpy as np

__all__ = ['ScriptedReachPolicy']


class ScriptedReachPolicy:
    """
    Map an observation of the reach task to a normalized joint-velocity action.

    :param max_speed: joint speed (rad/s) that action 1.0 stands for in the env.
    :param gain: proportional gain on the Cartesian error (1/s).
    :param damping: damping ``lambda`` of the least-squares inverse (m).
    """

    def __init__(self, max_speed: np.ndarray, gain: float = 4.0, damping: float = 0.05):
        self.max_speed = np.asarray(max_speed, dtype=np.float64)
        self.gain = gain
        self.damping = damping

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        """Return the action in [-1, 1]^6 that moves the flange towards the target."""
        q = np.asarray(obs[OBS_SLICES['q']], dtype=np.float64)
        error = np.asarray(obs[OBS_SLICES['to_target']], dtype=np.float64)  # m
        jac = position_jacobian(q)
        damped = jac @ jac.T + self.damping ** 2 * np.eye(3)
        qd = jac.T @ np.linalg.solve(damped, self.gain * error)  # rad/s
        return np.clip(qd / self.max_speed, -1.0, 1.0).astype(np.float32)
