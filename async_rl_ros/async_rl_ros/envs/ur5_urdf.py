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
A UR5 URDF built from the DH parameters in :mod:`ur5_kinematics`, with primitive shapes.

Why generated rather than the ``ur_description`` meshes of ``example-robot-data``: that wheel
is ~130 MB and its meshes make PyBullet's collision detection several times slower, while
the reach task only needs correct kinematics, plausible masses and simple collision
volumes. Building the URDF from the same DH table as the analytic kinematics keeps the two
in agreement by construction (a test checks it).

Link ``link<i>`` is the DH frame ``i-1`` rotated by joint ``i``; the fixed DH offsets of link
``i`` are the origin of joint ``i+1``; ``tool0`` is DH frame 6 (the flange).

With ``gripper=True`` a parallel-jaw gripper modelled on the Robotiq 2F-85 hangs from the
flange: a 0.9 kg body, two fingers on prismatic joints closing along the flange's y axis
(85 mm stroke), their tips :data:`FINGERTIP` below the flange, and a ``tcp`` frame between
the finger pads :data:`GRASP_POINT` below it. Boxes only: contacts stay cheap.
"""

from __future__ import annotations

import hashlib
import math
import os
import tempfile

from async_rl_ros.envs.ur5_kinematics import (
    DH_A, DH_ALPHA, DH_D, EFFORT_LIMIT, JOINT_LIMIT, LINK_MASS, SPEED_LIMIT)

__all__ = ['ur5_urdf', 'ur5_urdf_path', 'TOOL_LINK_INDEX', 'FINGERTIP', 'GRASP_POINT',
           'STROKE', 'FINGER_JOINTS', 'link_index']

#: PyBullet link index of ``tool0`` (six revolute joints, then the fixed flange joint).
TOOL_LINK_INDEX = 6
_RADIUS = (0.060, 0.054, 0.045, 0.040, 0.040, 0.032)  # m, collision cylinder radii
#: Gripper geometry (m, along the flange's z axis): the fingertips, the grasp point between
#: the pads, and the largest opening between the pads.
FINGERTIP, GRASP_POINT, STROKE = 0.16, 0.14, 0.085
_BODY = 0.10       # m: length of the gripper body below the flange
FINGER_JOINTS = ('finger_left', 'finger_right')


def _cylinder(length: float, radius: float, along_x: bool, offset: float) -> str:
    """Return origin + cylinder geometry for a segment starting at the link frame."""
    if along_x:
        origin = f'<origin xyz="{offset:.6f} 0 0" rpy="0 {math.pi / 2:.9f} 0"/>'
    else:
        origin = f'<origin xyz="0 0 {offset:.6f}" rpy="0 0 0"/>'
    return f'{origin}<geometry><cylinder length="{length:.6f}" radius="{radius}"/></geometry>'


def _link(i: int) -> str:
    """Return the URDF of link ``i`` (1-based) with inertia of a solid cylinder."""
    d, a = DH_D[i - 1], DH_A[i - 1]
    along_x = abs(a) > abs(d)
    length = max(abs(a) if along_x else abs(d), 0.05)
    offset = (a if along_x else d) / 2.0
    radius = _RADIUS[i - 1]
    shape = _cylinder(length, radius, along_x, offset)
    m = LINK_MASS[i - 1]
    i_axial = 0.5 * m * radius ** 2
    i_radial = m * (3 * radius ** 2 + length ** 2) / 12.0
    ixx, iyy, izz = (i_axial, i_radial, i_radial) if along_x else (i_radial, i_radial, i_axial)
    com = f'{offset:.6f} 0 0' if along_x else f'0 0 {offset:.6f}'
    return (
        f'  <link name="link{i}">\n'
        f'    <inertial><origin xyz="{com}" rpy="0 0 0"/><mass value="{m}"/>'
        f'<inertia ixx="{ixx:.6g}" ixy="0" ixz="0" iyy="{iyy:.6g}" iyz="0" izz="{izz:.6g}"/>'
        f'</inertial>\n'
        f'    <visual>{shape}<material name="grey"/></visual>\n'
        f'    <collision>{shape}</collision>\n'
        f'  </link>\n')


def _joint(i: int) -> str:
    """Return revolute joint ``i`` (1-based), placed at the fixed DH offsets of link i-1."""
    if i == 1:
        xyz, rpy = '0 0 0', '0 0 0'
    else:
        xyz = f'{DH_A[i - 2]:.6f} 0 {DH_D[i - 2]:.6f}'
        rpy = f'{DH_ALPHA[i - 2]:.9f} 0 0'
    parent = 'base_link' if i == 1 else f'link{i - 1}'
    return (
        f'  <joint name="joint{i}" type="revolute">\n'
        f'    <parent link="{parent}"/><child link="link{i}"/>\n'
        f'    <origin xyz="{xyz}" rpy="{rpy}"/><axis xyz="0 0 1"/>\n'
        f'    <limit lower="{-JOINT_LIMIT:.9f}" upper="{JOINT_LIMIT:.9f}" '
        f'effort="{EFFORT_LIMIT[i - 1]}" velocity="{SPEED_LIMIT}"/>\n'
        f'  </joint>\n')


def _box_link(name: str, size: tuple[float, float, float], xyz: str, mass: float,
              colour: str) -> str:
    x, y, z = size
    inertia = (mass * (y * y + z * z) / 12, mass * (x * x + z * z) / 12,
               mass * (x * x + y * y) / 12)
    geometry = f'<origin xyz="{xyz}"/><geometry><box size="{x} {y} {z}"/></geometry>'
    return (f'  <link name="{name}">\n'
            f'    <inertial><origin xyz="{xyz}"/><mass value="{mass}"/>'
            f'<inertia ixx="{inertia[0]:.6g}" ixy="0" ixz="0" iyy="{inertia[1]:.6g}" iyz="0" '
            f'izz="{inertia[2]:.6g}"/></inertial>\n'
            f'    <visual>{geometry}<material name="{colour}"/></visual>\n'
            f'    <collision>{geometry}</collision>\n'
            f'  </link>\n')


def _gripper() -> str:
    """Return the links and joints of the 2F-85-like gripper below ``tool0``."""
    finger_len = FINGERTIP - _BODY
    body = _box_link('gripper_body', (0.04, 0.09, _BODY), f'0 0 {_BODY / 2}', 0.9, 'dark')
    parts = [body, ('  <joint name="gripper_mount" type="fixed">\n'
                    '    <parent link="tool0"/><child link="gripper_body"/>\n'
                    '    <origin xyz="0 0 0"/>\n  </joint>\n')]
    for name, sign in zip(FINGER_JOINTS, (1, -1)):
        # The pad's inner face lies at the joint position (m from the middle), so the opening
        # between the pads is twice the joint position.
        parts.append(_box_link(name, (0.022, 0.01, finger_len),
                               f'0 {sign * 0.005} {finger_len / 2}', 0.05, 'dark'))
        parts.append(f'  <joint name="{name}" type="prismatic">\n'
                     f'    <parent link="gripper_body"/><child link="{name}"/>\n'
                     f'    <origin xyz="0 0 {_BODY}"/><axis xyz="0 {sign} 0"/>\n'
                     f'    <limit lower="0" upper="{STROKE / 2}" effort="235" velocity="0.075"/>\n'
                     f'  </joint>\n')
    parts.append(f'  <joint name="tcp_frame" type="fixed">\n'
                 f'    <parent link="tool0"/><child link="tcp"/>\n'
                 f'    <origin xyz="0 0 {GRASP_POINT}"/>\n  </joint>\n'
                 f'  <link name="tcp"><inertial><mass value="0.001"/>'
                 f'<inertia ixx="1e-7" ixy="0" ixz="0" iyy="1e-7" iyz="0" izz="1e-7"/>'
                 f'</inertial></link>\n')
    return ''.join(parts)


def link_index(body: int, name: str, client: int) -> int:
    """Return the PyBullet index of the link (or joint) ``name`` of ``body``."""
    import pybullet
    for j in range(pybullet.getNumJoints(body, physicsClientId=client)):
        info = pybullet.getJointInfo(body, j, physicsClientId=client)
        if name in (info[1].decode(), info[12].decode()):
            return j
    raise KeyError(name)


def ur5_urdf(gripper: bool = False) -> str:
    """Return the URDF text of the UR5 (base fixed at the world origin), with a gripper."""
    tool = (f'  <joint name="flange" type="fixed">\n'
            f'    <parent link="link6"/><child link="tool0"/>\n'
            f'    <origin xyz="{DH_A[5]:.6f} 0 {DH_D[5]:.6f}" rpy="{DH_ALPHA[5]:.9f} 0 0"/>\n'
            f'  </joint>\n'
            f'  <link name="tool0"><inertial><mass value="0.001"/>'
            f'<inertia ixx="1e-7" ixy="0" ixz="0" iyy="1e-7" iyz="0" izz="1e-7"/>'
            f'</inertial></link>\n')
    base = ('  <link name="base_link">\n'
            '    <inertial><origin xyz="0 0 0.03"/><mass value="4.0"/>'
            '<inertia ixx="0.0061" ixy="0" ixz="0" iyy="0.0061" iyz="0" izz="0.0072"/>'
            '</inertial>\n'
            f'    <visual>{_cylinder(0.06, 0.075, False, 0.03)}<material name="grey"/></visual>\n'
            f'    <collision>{_cylinder(0.06, 0.075, False, 0.03)}</collision>\n'
            '  </link>\n')
    body = ''.join(_joint(i) + _link(i) for i in range(1, 7))
    return ('<?xml version="1.0"?>\n<robot name="ur5">\n'
            '  <material name="grey"><color rgba="0.7 0.7 0.75 1"/></material>\n'
            '  <material name="dark"><color rgba="0.2 0.2 0.22 1"/></material>\n'
            + base + body + tool + (_gripper() if gripper else '') + '</robot>\n')


def ur5_urdf_path(gripper: bool = False) -> str:
    """
    Return the path of the URDF file, writing it on first use.

    The file lives in the temporary directory under a name derived from its content, so every
    process and every version of this module find their own copy without leaving one per run.
    """
    text = ur5_urdf(gripper)
    digest = hashlib.sha1(text.encode()).hexdigest()[:12]
    path = os.path.join(tempfile.gettempdir(), f'async_rl_ros_ur5_{digest}.urdf')
    if not os.path.exists(path):
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix='.urdf.tmp')
        with os.fdopen(fd, 'w', encoding='utf-8') as f:
            f.write(text)
        os.replace(tmp, path)  # atomic: concurrent workers never read a half-written file
    return path
