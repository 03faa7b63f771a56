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
The arm part of a UR5 task's action: joint velocities, or a tool-point velocity.

``task.action: joint`` -- six values, each a fraction of the joint's speed
(``task.action_scale`` of its limit). ``task.action: cartesian`` -- three values, a velocity of
the tool point (``task.ee_speed`` per unit; the flange in reach, the grasp point in the cube
tasks) in the base frame. Resolved-rate control (Whitney 1969) turns it into joint velocities
with the damped least-squares inverse of the tool point's 6x6 Jacobian (Wampler 1986); the
angular part of the twist steers the tool back to its home orientation, so three values move a
six-joint arm without letting the wrist wander, and the policy need not learn the arm's
Jacobian (reach learns in a fraction of the env steps).

Before that, each axis that would carry a guarded point (:meth:`SafetyFilter.points`) out of
the safety box is slowed, as panda-gym clips its end-effector target to its workspace: an
action towards a face (the table) closes half the gap a step instead of making the filter
brake the whole command, which would stop the other axes too. Either way the joint
velocities then pass the :class:`~async_rl_ros.envs.safety.SafetyFilter`, as every command.
"""

from __future__ import annotations

import math
from typing import Sequence

from async_rl_ros.core.config import TaskConfig
from async_rl_ros.envs.safety import SafetyFilter
from async_rl_ros.envs.ur5_kinematics import damped_step, fk, jacobian, turn_towards
import numpy as np

__all__ = ['ARM_ACT_DIMS', 'ArmAction', 'cartesian_to_joints']

#: Values of the arm part of an action, per ``task.action``.
ARM_ACT_DIMS = {'cartesian': 3, 'joint': 6}

_DAMPING = 0.05      # damped least squares lambda
_ORIENT_GAIN = 4.0   # 1/s: how fast an orientation error is corrected
_FACE_GAP = 0.005    # m: a cartesian action stops this far inside the safety box


def cartesian_to_joints(q: np.ndarray, velocity: np.ndarray, hold: np.ndarray,
                        max_speed: np.ndarray, tool: float = 0.0) -> np.ndarray:
    """
    Return joint velocities (rad/s) that move the tool point at ``velocity`` (m/s).

    :param q: joint positions (rad).
    :param velocity: wanted tool-point velocity, base frame (m/s).
    :param hold: 3x3 orientation the tool is steered back to.
    :param max_speed: joint speed caps (rad/s); the whole vector is scaled to respect them,
        so the direction of motion is kept.
    :param tool: distance (m) of the tool point along the flange's z axis.
    """
    jac, pose = jacobian(q, tool)
    twist = np.concatenate([velocity, _ORIENT_GAIN * turn_towards(hold, pose[:3, :3])])
    qd = damped_step(jac, twist, _DAMPING)
    over = float(np.max(np.abs(qd) / max_speed))
    return qd / over if over > 1.0 else qd


class ArmAction:
    """
    Turn the arm part of an action into the joint velocities (rad/s) the safety filter checks.

    :param task: the task section (``action``, ``ee_speed``, the control period).
    :param home_q: the home pose whose tool orientation a cartesian action holds (rad).
    :param tool: distance (m) of the tool point along the flange's z axis.
    """

    def __init__(self, task: TaskConfig, home_q: Sequence[float], tool: float = 0.0):
        self.kind = task.action
        self.cartesian = task.action == 'cartesian'
        self.dim = ARM_ACT_DIMS[task.action]
        self.ee_speed = float(task.ee_speed)
        self.tool = float(tool)
        self.hold = fk(np.asarray(home_q, dtype=np.float64))[:3, :3]
        self._span = 2.0 * task.dt

    def __call__(self, arm: Sequence[float], q: np.ndarray, speed: Sequence[float],
                 safety: SafetyFilter) -> list[float]:
        """
        Return the joint velocities the arm part ``arm`` of an action asks for at ``q``.

        :param arm: the ``dim`` arm values of the action, each clipped to [-1, 1].
        :param q: joint positions now (rad).
        :param speed: joint speed of a joint action 1.0, and the cap of a cartesian one (rad/s).
        :param safety: the filter whose box a cartesian action is kept in.
        :returns: six joint velocities, NaN where the action is not finite (the filter
            zeroes and counts it): that joint's, or all six of a cartesian action.
        """
        # Scalar maths on six values: cheaper than numpy temporaries at thousands of steps/s.
        values = [float(x) for x in arm]
        if len(values) != self.dim:
            raise ValueError(f'the arm part of an action has {self.dim} values (task.action: '
                             f'{self.kind}), not {len(values)}')
        if not self.cartesian:  # a value that is not finite stays so: the filter zeroes it
            return [min(max(x, -1.0), 1.0) * s if math.isfinite(x) else math.nan
                    for x, s in zip(values, speed)]
        if not all(math.isfinite(x) for x in values):
            return [math.nan] * 6
        velocity = self._inside_box(np.clip(values, -1.0, 1.0) * self.ee_speed, q, safety)
        return list(cartesian_to_joints(q, velocity, self.hold, np.asarray(speed), self.tool))

    def _inside_box(self, velocity: np.ndarray, q: np.ndarray,
                    safety: SafetyFilter) -> np.ndarray:
        """Slow each axis of a tool velocity (m/s) that would carry a guarded point out."""
        lo = np.asarray(safety.box_low) + _FACE_GAP
        hi = np.asarray(safety.box_high) - _FACE_GAP
        out = velocity
        for point in safety.points(q):
            p = np.asarray(point)
            out = np.clip(out, np.minimum((lo - p) / self._span, 0.0),
                          np.maximum((hi - p) / self._span, 0.0))
        return out
