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
Analytic forward kinematics of the UR5 from Universal Robots' published DH parameters.

Frames follow the standard (distal) Denavit-Hartenberg convention used by UR: frame 0 is the
controller's ``base`` frame (the one ``getActualTCPPose`` reports in) and frame 6 is the tool
flange (``tool0``). Lengths in metres, angles in radians.
"""

from __future__ import annotations

import math
import typing

import numpy as np
import transforms3d

__all__ = ['DH_D', 'DH_A', 'DH_ALPHA', 'JOINT_LIMIT', 'SPEED_LIMIT', 'EFFORT_LIMIT',
           'LINK_MASS', 'REACH_BOUND', 'fk', 'fk_position', 'position_jacobian', 'jacobian',
           'turn_towards', 'damped_step', 'shift_tool']

DH_D = (0.089159, 0.0, 0.0, 0.10915, 0.09465, 0.0823)            # m
DH_A = (0.0, -0.425, -0.39225, 0.0, 0.0, 0.0)                    # m
DH_ALPHA = (math.pi / 2, 0.0, 0.0, math.pi / 2, -math.pi / 2, 0.0)  # rad
JOINT_LIMIT = 2 * math.pi                                        # rad, symmetric
SPEED_LIMIT = 3.14                                               # rad/s, every joint
EFFORT_LIMIT = (150.0, 150.0, 150.0, 28.0, 28.0, 28.0)           # N m
LINK_MASS = (3.7, 8.393, 2.275, 1.219, 1.219, 0.1879)            # kg, links 1..6

#: Upper bound of the distance from any joint axis to the flange (m). A joint-space step
#: ``dq`` moves the flange by at most ``REACH_BOUND * sum(|dq|)``: a cheap Lipschitz bound.
REACH_BOUND = sum(abs(a) for a in DH_A) + sum(DH_D[1:])

_CA = tuple(math.cos(a) for a in DH_ALPHA)
_SA = tuple(math.sin(a) for a in DH_ALPHA)
_IK_ITERATIONS = 100   # damped least squares steps :func:`shift_tool` may take
_IK_DAMPING = 0.01     # its lambda (m)


def _link(i: int, theta: float) -> np.ndarray:
    """Return the DH transform of link ``i`` (0-based) at joint angle ``theta`` (rad)."""
    ct, st = math.cos(theta), math.sin(theta)
    return np.array([[ct, -st * _CA[i], st * _SA[i], DH_A[i] * ct],
                     [st, ct * _CA[i], -ct * _SA[i], DH_A[i] * st],
                     [0.0, _SA[i], _CA[i], DH_D[i]],
                     [0.0, 0.0, 0.0, 1.0]])


def fk(q: np.ndarray) -> np.ndarray:
    """
    Return the 4x4 pose of the flange in the base frame for joint positions ``q`` (rad).

    :param q: six joint positions (rad).
    :returns: homogeneous transform base -> tool0 (translation in m).
    """
    t = np.eye(4)
    for i in range(6):
        t = t @ _link(i, q[i])
    return t


def fk_position(q: typing.Sequence[float], tool: float = 0.0) -> tuple[float, float, float]:
    """
    Return only the flange position (m), or a point ``tool`` m beyond it, in closed form.

    This runs several times per control step inside the safety filter, so instead of
    composing six transforms it evaluates the product expanded for UR's DH table
    (alpha = pi/2, 0, 0, pi/2, -pi/2, 0 and d2 = d3 = 0; joint 6 does not move the flange).
    :func:`fk` is the reference; a test keeps the two equal.

    :param tool: distance (m) along the flange's z axis (a gripper's fingertips): the flange
        is ``d6`` along frame 5's z axis, so the point is the same product with ``d6 + tool``.
    """
    d1, _, _, d4, d5, d6 = DH_D
    d6 += tool
    a2, a3 = DH_A[1], DH_A[2]
    s1, c1 = math.sin(q[0]), math.cos(q[0])
    q23 = q[1] + q[2]
    q234 = q23 + q[3]
    s234, c234 = math.sin(q234), math.cos(q234)
    s5, c5 = math.sin(q[4]), math.cos(q[4])
    # In-plane reach of the arm, and the offset perpendicular to that plane.
    reach = a2 * math.cos(q[1]) + a3 * math.cos(q23) + d5 * s234 - d6 * s5 * c234
    offset = d4 + d6 * c5
    return (c1 * reach + s1 * offset,
            s1 * reach - c1 * offset,
            d1 + a2 * math.sin(q[1]) + a3 * math.sin(q23) - d5 * c234 - d6 * s5 * s234)


def position_jacobian(q: np.ndarray) -> np.ndarray:
    """
    Return the 3x6 Jacobian of the flange position with respect to the joints (m/rad).

    Column i is ``z_{i-1} x (p - o_{i-1})`` for the revolute joint i (the linear rows of
    :func:`jacobian`).
    """
    return jacobian(q)[0][:3]


def jacobian(q: np.ndarray, tool: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """
    Return the 6x6 geometric Jacobian of a tool point, and the tool pose.

    :param q: six joint positions (rad).
    :param tool: distance (m) of the tool point along the flange's z axis.
    :returns: ``(J, T)``: rows 0-2 the linear velocity (m/rad), rows 3-5 the angular velocity
        (rad/rad) of the tool frame in the base frame; ``T`` the 4x4 pose base -> tool.
    """
    t = np.eye(4)
    origins, axes = [], []
    for i in range(6):
        origins.append(t[:3, 3].copy())
        axes.append(t[:3, 2].copy())
        t = t @ _link(i, q[i])
    t[:3, 3] = t[:3, 3] + tool * t[:3, 2]
    p = t[:3, 3]
    linear = np.stack([np.cross(z, p - o) for z, o in zip(axes, origins)], axis=1)
    return np.vstack([linear, np.stack(axes, axis=1)]), t


def turn_towards(hold: np.ndarray, rotation: np.ndarray) -> np.ndarray:
    """Return the rotation vector (rad, base frame) that turns ``rotation`` into ``hold``."""
    axis, angle = transforms3d.axangles.mat2axangle(hold @ rotation.T)
    return angle * np.asarray(axis)


def damped_step(jac: np.ndarray, twist: np.ndarray, damping: float) -> np.ndarray:
    """
    Return the damped least squares joint step ``J^T (J J^T + damping^2 I)^-1 twist``.

    :param jac: the 6x6 :func:`jacobian`.
    :param twist: wanted linear and angular motion of the tool (velocity or displacement).
    :param damping: the damping lambda (m): larger trades accuracy for calm near singularities.
    """
    return jac.T @ np.linalg.solve(jac @ jac.T + damping ** 2 * np.eye(6), twist)


def shift_tool(q: np.ndarray, offset: np.ndarray, tool: float = 0.0,
               tolerance: float = 1e-4) -> np.ndarray | None:
    """
    Return joint positions that move a tool point by ``offset``, its orientation kept.

    :func:`damped_step` iterations from ``q`` (a few dozen for the moves a reset makes).

    :param q: six joint positions (rad) to start from.
    :param offset: wanted displacement of the tool point, base frame (m).
    :param tool: distance (m) of the tool point along the flange's z axis.
    :param tolerance: largest position error (m) of an answer.
    :returns: the joints, or ``None`` where no pose within ``tolerance`` was found.
    """
    q = np.array(q, dtype=np.float64)
    _, start = jacobian(q, tool)
    goal, hold = start[:3, 3] + np.asarray(offset, dtype=np.float64), start[:3, :3]
    for _ in range(_IK_ITERATIONS):
        jac, pose = jacobian(q, tool)
        error = np.concatenate([goal - pose[:3, 3], turn_towards(hold, pose[:3, :3])])
        if np.linalg.norm(error[:3]) < tolerance and np.linalg.norm(error[3:]) < 1e-3:
            return q
        q += damped_step(jac, error, _IK_DAMPING)
    return None
