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

"""UR5 kinematics: analytic DH model, the generated URDF in PyBullet, and helpers."""

import math

from async_rl_ros.envs.arm import rotvec_to_quat
from async_rl_ros.envs.safety import reach_radii
from async_rl_ros.envs.ur5_kinematics import (fk, fk_position, jacobian, position_jacobian,
                                              shift_tool)
from async_rl_ros.envs.ur5_urdf import TOOL_LINK_INDEX, ur5_urdf_path
import numpy as np
import pybullet
import pytest
import transforms3d


@pytest.fixture(scope='module')
def bullet():
    cid = pybullet.connect(pybullet.DIRECT)
    robot = pybullet.loadURDF(ur5_urdf_path(), useFixedBase=True, physicsClientId=cid)
    yield cid, robot
    pybullet.disconnect(cid)


def test_published_dh_parameters():
    """The home pose of the published UR5 DH table puts the flange where UR documents it."""
    pose = fk([0.0, -math.pi / 2, 0.0, -math.pi / 2, 0.0, 0.0])
    # Arm straight up: z = d1 + |a2| + |a3| + d5, x = 0, y = -(d4 + d6).
    np.testing.assert_allclose(pose[:3, 3], [0.0, -(0.10915 + 0.0823),
                                             0.089159 + 0.425 + 0.39225 + 0.09465], atol=1e-9)


def test_pybullet_matches_dh_on_200_random_configurations(bullet):
    cid, robot = bullet
    assert pybullet.getJointInfo(robot, TOOL_LINK_INDEX, physicsClientId=cid)[12] == b'tool0'
    rng = np.random.default_rng(2026)
    worst_pos, worst_rot = 0.0, 0.0
    for _ in range(200):
        q = rng.uniform(-2 * math.pi, 2 * math.pi, size=6)
        for j in range(6):
            pybullet.resetJointState(robot, j, q[j], physicsClientId=cid)
        link = pybullet.getLinkState(robot, TOOL_LINK_INDEX, computeForwardKinematics=True,
                                     physicsClientId=cid)
        x, y, z, w = link[5]
        rot_bullet = transforms3d.quaternions.quat2mat([w, x, y, z])
        expected = fk(q)
        worst_pos = max(worst_pos, float(np.max(np.abs(np.array(link[4]) - expected[:3, 3]))))
        relative = rot_bullet.T @ expected[:3, :3]
        angle = math.acos(min(1.0, max(-1.0, (np.trace(relative) - 1.0) / 2.0)))
        worst_rot = max(worst_rot, angle)
    assert worst_pos < 1e-4  # m
    assert worst_rot < 1e-3  # rad


def test_closed_form_position_matches_transform_chain():
    rng = np.random.default_rng(1)
    for _ in range(500):
        q = rng.uniform(-7.0, 7.0, size=6)
        np.testing.assert_allclose(fk_position(q), fk(q)[:3, 3], atol=1e-12)


def test_position_jacobian_matches_finite_differences():
    rng = np.random.default_rng(2)
    for _ in range(50):
        q = rng.uniform(-3.0, 3.0, size=6)
        eps = 1e-6
        numeric = np.stack([(np.array(fk_position(q + eps * e)) -
                             np.array(fk_position(q - eps * e))) / (2 * eps)
                            for e in np.eye(6)], axis=1)
        np.testing.assert_allclose(position_jacobian(q), numeric, atol=1e-7)


@pytest.mark.parametrize('tool', [0.0, 0.16])
def test_joint_radius_bound_holds(tool):
    """The per-joint Lipschitz bound the safety filter relies on is never exceeded."""
    rng = np.random.default_rng(3)
    radii = reach_radii(tool)
    for _ in range(5000):
        q = rng.uniform(-7.0, 7.0, size=6)
        dq = rng.normal(0.0, 0.05, size=6) * (rng.uniform(size=6) < 0.5)
        moved = np.linalg.norm(np.subtract(fk_position(q + dq, tool), fk_position(q, tool)))
        assert moved <= float(np.dot(radii, np.abs(dq))) + 1e-12


def test_tool_point_and_jacobian_agree_with_the_transform_chain():
    """The tool point lies on the flange's z axis; the 6x6 Jacobian matches differences."""
    rng = np.random.default_rng(5)
    eps = 1e-6
    for _ in range(20):
        q = rng.uniform(-3.0, 3.0, size=6)
        t = fk(q)
        np.testing.assert_allclose(fk_position(q, 0.16), t[:3, 3] + 0.16 * t[:3, 2], atol=1e-12)
        jac, pose = jacobian(q, 0.16)
        np.testing.assert_allclose(pose[:3, 3], fk_position(q, 0.16), atol=1e-12)
        for i in range(6):
            e = np.zeros(6)
            e[i] = eps
            hi, lo = fk(q + e), fk(q - e)
            lin = (np.array(fk_position(q + e, 0.16)) - np.array(fk_position(q - e, 0.16)))
            np.testing.assert_allclose(jac[:3, i], lin / (2 * eps), atol=1e-7)
            # angular velocity: the skew part of dR R^T
            omega = (hi[:3, :3] - lo[:3, :3]) / (2 * eps) @ t[:3, :3].T
            np.testing.assert_allclose(jac[3:, i], [omega[2, 1], omega[0, 2], omega[1, 0]],
                                       atol=1e-6)


def test_rotation_vector_to_quaternion():
    rng = np.random.default_rng(4)
    np.testing.assert_allclose(rotvec_to_quat(np.zeros(3)), [1.0, 0.0, 0.0, 0.0])
    for _ in range(100):
        axis = rng.normal(size=3)
        axis /= np.linalg.norm(axis)
        angle = rng.uniform(0.0, math.pi)
        quat = rotvec_to_quat(axis * angle)
        assert abs(np.linalg.norm(quat) - 1.0) < 1e-12
        np.testing.assert_allclose(transforms3d.quaternions.quat2mat(quat),
                                   transforms3d.axangles.axangle2mat(axis, angle), atol=1e-12)


def test_shift_tool_moves_the_tool_point_and_keeps_its_orientation():
    q = np.array([0.0, -1.4272, 1.8683, -2.0119, -1.5708, 0.0])
    offset = np.array([0.1, -0.1, 0.15])
    moved = shift_tool(q, offset, tool=0.16)
    np.testing.assert_allclose(np.subtract(fk_position(moved, 0.16), fk_position(q, 0.16)),
                               offset, atol=1e-4)
    np.testing.assert_allclose(fk(moved)[:3, :3], fk(q)[:3, :3], atol=1e-3)
    assert shift_tool(q, (0.0, 0.0, 2.0), tool=0.16) is None   # beyond the arm's reach
