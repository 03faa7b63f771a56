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
The simulated manipulation cell: the UR5 with a 2F-85-like gripper, a table and a cube.

The table top lies :data:`TABLE_TOP` above the robot's mounting plane; the cube (5 cm,
:data:`CUBE_MASS`) rests on it. The fingers are position-controlled towards the commanded
opening at the gripper's speed, pressing with at most the configured force, as the 2F-85's
own controller does; friction lets them hold the cube.
"""

from __future__ import annotations

from async_rl_ros.core.config import EnvWorkerConfig, ManipulationConfig, SimConfig
from async_rl_ros.envs.arm import ArmState
from async_rl_ros.envs.manipulation_task import (CellState, CUBE_MASS, CUBE_SIZE, REST_HEIGHT,
                                                 TABLE_TOP)
from async_rl_ros.envs.pybullet_backend import PyBulletUR5
from async_rl_ros.envs.ur5_urdf import FINGER_JOINTS, link_index, STROKE, ur5_urdf_path
import numpy as np
import pybullet

__all__ = ['PyBulletCell']


class PyBulletCell(PyBulletUR5):
    """
    The UR5 backend with a gripper and a cube on a table.

    :param sim: physics settings.
    :param control_dt: control period (s).
    :param cfg: gripper force and speed.
    """

    def __init__(self, sim: SimConfig, control_dt: float, cfg: ManipulationConfig):
        self.grip_force = float(cfg.grip_force)
        self.grip_speed = float(cfg.grip_speed)
        self.width_target = STROKE
        super().__init__(sim, control_dt, urdf=ur5_urdf_path(gripper=True))

    def _rebuild(self) -> None:
        """
        Build the cell afresh: every reset does, so a seeded episode repeats exactly.

        Bullet keeps solver state (warm-started impulses of the motors and of the finger
        coupling) that neither ``restoreState`` nor resetting joints clears; a new world costs
        a few milliseconds an episode.
        """
        pybullet.resetSimulation(physicsClientId=self.cid)
        self._load_world()

    def _load_world(self) -> None:
        """Load the arm with its gripper (the base class), then the table and the cube."""
        super()._load_world()
        cid = self.cid
        self.fingers = [link_index(self.robot, name, cid) for name in FINGER_JOINTS]
        self.tcp_link = link_index(self.robot, 'tcp', cid)
        half = CUBE_SIZE / 2
        table = pybullet.createCollisionShape(pybullet.GEOM_BOX,
                                              halfExtents=[0.35, 0.45, TABLE_TOP / 2],
                                              physicsClientId=cid)
        self.table = pybullet.createMultiBody(0.0, table, basePosition=[-0.5, -0.1, TABLE_TOP / 2],
                                              physicsClientId=cid)
        cube = pybullet.createCollisionShape(pybullet.GEOM_BOX, halfExtents=[half] * 3,
                                             physicsClientId=cid)
        visual = pybullet.createVisualShape(pybullet.GEOM_BOX, halfExtents=[half] * 3,
                                            rgbaColor=[0.85, 0.45, 0.1, 1.0], physicsClientId=cid)
        self.cube = pybullet.createMultiBody(CUBE_MASS, cube, visual,
                                             basePosition=[-0.5, -0.1, REST_HEIGHT],
                                             physicsClientId=cid)
        # Bullet multiplies the two bodies' coefficients: pads on the cube 1.0 x 1.5, the cube
        # sliding on the table 1.0 x 0.5 (pushed, it slides rather than tips).
        pybullet.changeDynamics(self.cube, -1, lateralFriction=1.0, spinningFriction=0.001,
                                physicsClientId=cid)
        pybullet.changeDynamics(self.table, -1, lateralFriction=0.5, physicsClientId=cid)
        for f in self.fingers:
            # A friction anchor keeps a held cube from creeping out of the grip.
            pybullet.changeDynamics(self.robot, f, lateralFriction=1.5, frictionAnchor=True,
                                    physicsClientId=cid)
        # The 2F-85's fingers share one linkage: they move together. A gear constraint couples
        # the two prismatic joints (equal positions), or the cube is shoved to one side.
        gear = pybullet.createConstraint(self.robot, self.fingers[0], self.robot, self.fingers[1],
                                         pybullet.JOINT_GEAR, [0, 1, 0], [0, 0, 0], [0, 0, 0],
                                         physicsClientId=cid)
        pybullet.changeConstraint(gear, gearRatio=-1, erp=0.2, maxForce=1000,
                                  physicsClientId=cid)

    def reset_cell(self, q: np.ndarray, cube_xy: np.ndarray, cube_yaw: float) -> ArmState:
        """Put the arm at ``q`` at rest with the gripper open, and the cube on the table."""
        self._rebuild()
        for f in self.fingers:
            pybullet.resetJointState(self.robot, f, STROKE / 2, 0.0, physicsClientId=self.cid)
        self.width_target = STROKE
        self._grip()
        quat = pybullet.getQuaternionFromEuler([0.0, 0.0, float(cube_yaw)])
        pybullet.resetBasePositionAndOrientation(
            self.cube, [float(cube_xy[0]), float(cube_xy[1]), REST_HEIGHT], quat,
            physicsClientId=self.cid)
        pybullet.resetBaseVelocity(self.cube, [0.0] * 3, [0.0] * 3, physicsClientId=self.cid)
        return self.reset(q)

    def reset_held(self, q: np.ndarray) -> ArmState:
        """
        Put the arm at ``q`` at rest with the cube between its fingers, closing on it.

        The cube is centred on the grasp point, square to the pads, which touch it and press
        with ``grip_force`` from the first step: a start that already carries the cube
        (``sim.cube_in_gripper``).
        """
        self._rebuild()
        state = self.reset(q)
        for f in self.fingers:
            pybullet.resetJointState(self.robot, f, CUBE_SIZE / 2, 0.0, physicsClientId=self.cid)
        self.width_target = 0.0
        self._grip()
        link = pybullet.getLinkState(self.robot, self.tcp_link, computeForwardKinematics=True,
                                     physicsClientId=self.cid)
        pybullet.resetBasePositionAndOrientation(self.cube, link[4], link[5],
                                                 physicsClientId=self.cid)
        pybullet.resetBaseVelocity(self.cube, [0.0] * 3, [0.0] * 3, physicsClientId=self.cid)
        return state

    def use_config(self, cfg: EnvWorkerConfig) -> None:
        """Take the control period and the gripper's force and speed (``manipulation.grip_*``)."""
        super().use_config(cfg)
        self.grip_force = float(cfg.manipulation.grip_force)
        self.grip_speed = float(cfg.manipulation.grip_speed)

    def set_gripper(self, width: float) -> None:
        """Command the opening (m) between the pads, clipped to the stroke."""
        self.width_target = min(max(float(width), 0.0), STROKE)
        self._grip()

    def cell(self) -> CellState:
        """Read the gripper and the cube."""
        cid = self.cid
        link = pybullet.getLinkState(self.robot, self.tcp_link, computeLinkVelocity=True,
                                     computeForwardKinematics=True, physicsClientId=cid)
        rot = np.reshape(pybullet.getMatrixFromQuaternion(link[5]), (3, 3))
        fingers = pybullet.getJointStates(self.robot, self.fingers, physicsClientId=cid)
        pos, quat = pybullet.getBasePositionAndOrientation(self.cube, physicsClientId=cid)
        vel, spin = pybullet.getBaseVelocity(self.cube, physicsClientId=cid)
        return CellState(tcp=np.array(link[4]), tcp_vel=np.array(link[6]), tcp_rot=rot,
                         width=float(fingers[0][0] + fingers[1][0]), cube=np.array(pos),
                         cube_quat=np.array(quat), cube_vel=np.array(vel),
                         cube_spin=np.array(spin))

    def _grip(self) -> None:
        # Each finger travels half the opening: the pads close at grip_speed together.
        for f in self.fingers:
            pybullet.setJointMotorControl2(self.robot, f, pybullet.POSITION_CONTROL,
                                           targetPosition=self.width_target / 2,
                                           force=self.grip_force,
                                           maxVelocity=self.grip_speed / 2,
                                           physicsClientId=self.cid)
