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

"""The contract between the reach task and a robot backend (simulated or real)."""

from __future__ import annotations

import dataclasses
from typing import Protocol

import numpy as np
import transforms3d

__all__ = ['ArmState', 'ArmBackend', 'rotvec_to_quat']


@dataclasses.dataclass
class ArmState:
    """One reading of the arm, all in the robot's base frame."""

    q: np.ndarray         #: joint positions (rad), shape (6,)
    qd: np.ndarray        #: joint velocities (rad/s), shape (6,)
    ee_pos: np.ndarray    #: flange position (m), shape (3,)
    ee_quat: np.ndarray   #: flange orientation, unit quaternion (w, x, y, z)
    stamp: float          #: time of the reading (s), backend clock


class ArmBackend(Protocol):
    """What the reach task needs from a UR5, simulated or real."""

    def reset(self, q: np.ndarray) -> ArmState:
        """Bring the arm to rest at joint positions ``q`` (rad) and return the state there."""

    def step(self, qd: np.ndarray) -> ArmState:
        """Hold joint velocities ``qd`` (rad/s, already filtered) for one control period."""

    def read(self) -> ArmState:
        """Return the current state without moving."""

    def stop(self) -> None:
        """Bring the arm to a standstill."""

    def close(self) -> None:
        """Release the simulator or the connection."""


def rotvec_to_quat(rotvec: np.ndarray) -> np.ndarray:
    """
    Convert a rotation vector (axis * angle, rad), as UR controllers report TCP orientation.

    :returns: the unit quaternion (w, x, y, z).
    """
    rotvec = np.asarray(rotvec, dtype=np.float64)
    angle = float(np.linalg.norm(rotvec))
    if angle < 1e-12:
        return np.array([1.0, 0.0, 0.0, 0.0])
    return transforms3d.quaternions.axangle2quat(rotvec / angle, angle)
