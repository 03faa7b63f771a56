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

"""Simulated UR5 in PyBullet (DIRECT by default), velocity-controlled like ``speedJ``."""

from __future__ import annotations

import time

from async_rl_ros.core.config import EnvWorkerConfig, SimConfig
from async_rl_ros.envs.arm import ArmState
from async_rl_ros.envs.display import check_gui
from async_rl_ros.envs.ur5_kinematics import EFFORT_LIMIT
from async_rl_ros.envs.ur5_urdf import TOOL_LINK_INDEX, ur5_urdf_path
import numpy as np
import pybullet

__all__ = ['PyBulletUR5']

_JOINTS = list(range(6))


class PyBulletUR5:
    """
    A UR5 whose joint velocity motors track the commanded velocity, with gravity.

    :param sim: physics settings (rate, GUI).
    :param control_dt: control period (s); each :meth:`step` runs
        ``round(control_dt * physics_hz)`` physics sub-steps.
    :param urdf: the robot's URDF file (default: the bare UR5 of :func:`ur5_urdf_path`).
    """

    #: :meth:`reset` puts the joints anywhere at once (no path to check).
    teleports = True

    def __init__(self, sim: SimConfig, control_dt: float, urdf: str | None = None):
        self.physics_hz = float(sim.physics_hz)
        self.substeps = max(1, int(round(control_dt * sim.physics_hz)))
        self.physics_dt = control_dt / self.substeps
        check_gui(sim.gui)  # a GUI without a display hangs in pybullet.connect
        mode = pybullet.GUI if sim.gui else pybullet.DIRECT
        # Plain pybullet calls with an explicit client id: a BulletClient wrapper costs a
        # partial() per call, measurable at thousands of steps per second.
        self.cid = pybullet.connect(mode)
        self.urdf = urdf or ur5_urdf_path()
        self._load_world()
        self.forces = list(EFFORT_LIMIT)
        self.gui = sim.gui
        self.time = 0.0  # s of simulated time
        self.real_time = bool(sim.real_time)
        self._deadline: float | None = None  # wall-clock end of the current control period

    def _load_world(self) -> None:
        """Set gravity and the physics step, and load the robot (subclasses add to it)."""
        pybullet.setGravity(0.0, 0.0, -9.81, physicsClientId=self.cid)
        pybullet.setTimeStep(self.physics_dt, physicsClientId=self.cid)
        self.robot = pybullet.loadURDF(self.urdf, useFixedBase=True,
                                       flags=pybullet.URDF_USE_INERTIA_FROM_FILE,
                                       physicsClientId=self.cid)
        self._marker: int | None = None  # the target sphere, drawn on first use (GUI)

    # ------------------------------------------------------------------ ArmBackend
    def reset(self, q: np.ndarray) -> ArmState:
        """Teleport the joints to ``q`` (rad) at rest."""
        for j in _JOINTS:
            pybullet.resetJointState(self.robot, j, float(q[j]), 0.0,
                                     physicsClientId=self.cid)
        self._command(np.zeros(6))
        self.time = 0.0
        return self.read()

    def use_config(self, cfg: EnvWorkerConfig) -> None:
        """
        Take the control period ``cfg.task.dt`` (the env calls it between episodes).

        ``sim.*`` is read-only: the physics rate stays the one the backend was built with.
        """
        self.real_time = bool(cfg.sim.real_time)
        substeps = max(1, int(round(cfg.task.dt * self.physics_hz)))
        physics_dt = cfg.task.dt / substeps
        if (substeps, physics_dt) != (self.substeps, self.physics_dt):
            self.substeps, self.physics_dt = substeps, physics_dt
            pybullet.setTimeStep(physics_dt, physicsClientId=self.cid)

    def step(self, qd: np.ndarray) -> ArmState:
        """Hold ``qd`` (rad/s) for one control period of physics."""
        self._command(qd)
        for _ in range(self.substeps):
            pybullet.stepSimulation(physicsClientId=self.cid)
        period = self.physics_dt * self.substeps
        self.time += period
        if self.real_time:  # as a physical arm: the step lasts its control period
            now = time.monotonic()
            deadline = (self._deadline or now) + period
            if deadline > now:
                time.sleep(deadline - now)
            self._deadline = max(deadline, now)  # a late step is not made up for
        return self.read()

    def read(self) -> ArmState:
        """Read joints and flange pose."""
        joints = pybullet.getJointStates(self.robot, _JOINTS, physicsClientId=self.cid)
        link = pybullet.getLinkState(self.robot, TOOL_LINK_INDEX, computeForwardKinematics=True,
                                     physicsClientId=self.cid)
        x, y, z, w = link[5]
        q, qd = np.array([js[:2] for js in joints]).T
        return ArmState(q=q, qd=qd, ee_pos=np.array(link[4]), ee_quat=np.array([w, x, y, z]),
                        stamp=self.time)

    def stop(self) -> None:
        """Command zero velocity (the motors brake within one sub-step)."""
        self._command(np.zeros(6))

    def close(self) -> None:
        """Disconnect from the physics server."""
        if self.cid >= 0:
            pybullet.disconnect(physicsClientId=self.cid)
            self.cid = -1

    # ------------------------------------------------------------------ extras
    def show_target(self, target: np.ndarray) -> None:
        """Draw the target as a green sphere (GUI only; free in DIRECT mode)."""
        if not self.gui:
            return
        if self._marker is None:
            shape = pybullet.createVisualShape(pybullet.GEOM_SPHERE, radius=0.02,
                                               rgbaColor=[0.1, 0.8, 0.2, 0.8],
                                               physicsClientId=self.cid)
            self._marker = pybullet.createMultiBody(baseVisualShapeIndex=shape,
                                                    physicsClientId=self.cid)
        pybullet.resetBasePositionAndOrientation(self._marker, list(target), [0, 0, 0, 1],
                                                 physicsClientId=self.cid)

    def render_rgb(self, width: int = 320, height: int = 240) -> np.ndarray:
        """Return an RGB image (height, width, 3) from a fixed camera, CPU renderer."""
        view = pybullet.computeViewMatrix([0.6, 0.9, 0.8], [-0.35, -0.1, 0.2], [0, 0, 1])
        proj = pybullet.computeProjectionMatrixFOV(60.0, width / height, 0.05, 5.0)
        img = pybullet.getCameraImage(width, height, view, proj,
                                      renderer=pybullet.ER_TINY_RENDERER,
                                      physicsClientId=self.cid)
        return np.reshape(np.asarray(img[2], dtype=np.uint8), (height, width, 4))[:, :, :3]

    def _command(self, qd: np.ndarray) -> None:
        pybullet.setJointMotorControlArray(self.robot, _JOINTS, pybullet.VELOCITY_CONTROL,
                                           targetVelocities=[float(v) for v in qd],
                                           forces=self.forces, physicsClientId=self.cid)
