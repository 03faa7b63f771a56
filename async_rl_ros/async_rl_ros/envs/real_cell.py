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
The physical cube cell behind the calls of the simulated one: a UR5, its 2F-85, a seen cube.

The arm is :class:`~async_rl_ros.envs.ur5_rtde.UR5RTDE` with its supervisor, its reset moves
keeping the fingertips in the workspace box; the gripper is a 2F-85
(:class:`~async_rl_ros.envs.gripper_driver.GripperDriver`) or one on a digital output
(:class:`~async_rl_ros.envs.gripper_driver.DigitalGripper`); the cube's pose comes from outside
through a :class:`~async_rl_ros.envs.object_pose.PoseBoard`. Both are inputs of the arm's
policy gate, so the arm holds still -- the step is interrupted and the episode truncated, as
for any hold -- while the gripper's link is down or the newest cube pose is older than
``cell.pose_max_age_s``; a pose lost for ``cell.place_timeout_s`` asks for a person.

Nobody places the cube on a real table: a reset opens the gripper, lifts the fingertips, moves
over the start pose and holds the arm there, clear of the table, until the cube rests in its
start box (``manipulation.object_low/high``), for a person (or a script of the user's) to put
it back, asking for a person by name after ``cell.place_timeout_s``; then it lowers the arm to
the start pose (``manipulation.home_q``, a few centimetres above the cube).
"""

from __future__ import annotations

import time
from typing import Any, Callable

from async_rl_ros.core.config import EnvWorkerConfig
from async_rl_ros.core.errors import NeedsPerson
from async_rl_ros.envs.arm import ArmState
from async_rl_ros.envs.gripper_driver import DigitalGripper, GripperDriver
from async_rl_ros.envs.manipulation_task import CellState
from async_rl_ros.envs.object_pose import PoseBoard
from async_rl_ros.envs.rtde_supervisor import PolicyGate
from async_rl_ros.envs.ur5_kinematics import fk_position, jacobian, shift_tool
from async_rl_ros.envs.ur5_rtde import UR5RTDE
from async_rl_ros.envs.ur5_urdf import FINGERTIP, GRASP_POINT, STROKE
import numpy as np

__all__ = ['RealCell', 'CLEAR_LIFT', 'PLACE_TOLERANCE', 'REST_SPEED']

PLACE_TOLERANCE = 0.01   #: m: how far outside its start box a placed cube may lie
REST_SPEED = 0.02        #: m/s: a cube slower than this rests
CLEAR_LIFT = 0.15        #: m: a reset lifts the fingertips this far before moving over
_LIFT_SPARE = 0.01       # m the lifted flange keeps below the box top, less its margin


class RealCell:
    """
    The cube cell of a physical UR5.

    :param cfg: worker configuration (``rtde.*``, ``cell.*``, ``manipulation.*``).
    :param gate: the policy gate of a learning worker; ``None`` (a fixed policy) builds one
        that watches only the gripper and the cube.
    :param board: where the cube's pose arrives (the transport feeds it).
    :param clock: monotonic clock (s) of the placement and staleness timeouts.
    """

    teleports = False

    def __init__(self, cfg: EnvWorkerConfig, gate: PolicyGate | None, board: PoseBoard,
                 clock: Callable[[], float] = time.monotonic):
        self.cfg = cfg
        self.board = board
        self.clock = clock
        self.gate = gate if gate is not None else PolicyGate(0, float('inf'))
        self._placing_since: float | None = None   # a reset waits for the cube
        self._moving = False                        # a reset move (the cube may be hidden)
        self._usable_at = clock()                   # last time the cube pose was usable
        digital = cfg.cell.gripper == 'digital_output'
        self.arm = UR5RTDE(cfg, gate=self.gate, tool_length=FINGERTIP, digital_io=digital)
        self.gripper = (DigitalGripper(cfg.cell.gripper_output, STROKE) if digital
                        else GripperDriver.from_config(cfg))
        self.gate.watch('gripper', self.gripper.reason)
        self.gate.watch('cube', self._cube_reason)
        try:
            if digital:
                self.gripper.attach(self.arm)
            self.gripper.start()
        except BaseException:
            self.arm.close()
            raise
        self._state: ArmState | None = None

    @property
    def interrupted(self) -> str | None:
        """Why the last step did not run as commanded (``None``: it did)."""
        return self.arm.interrupted

    def reset_cell(self, q: np.ndarray, cube_xy: np.ndarray, cube_yaw: float) -> ArmState:
        """
        Open the gripper, go to ``q`` from above, holding there until the cube is in place.

        The fingertips rise :data:`CLEAR_LIFT` where they are, move over ``q`` at that height
        and wait there (out of the way of a hand putting the cube back) until the cube rests
        in its start box, then come down to ``q``. ``cube_xy`` and ``cube_yaw`` (where a
        simulation would put the cube) are not used: the cube is where it is, and the target
        is drawn from its measured position.
        """
        self.gripper.command(STROKE)
        try:
            here = self.arm.read().q
        except RuntimeError:   # no fresh state (lost link): the first move recovers it
            here = None
        above = self._lifted(q)
        self._move(([self._lifted(here)] if here is not None else []) + [above])
        self._placing_since = self.clock()
        try:
            self._state = self.arm.step(np.zeros(6))   # holds (gate) until the cube is placed
        finally:
            self._placing_since = None
        self._move([q])
        self._usable_at = self.clock()
        return self._state

    def _move(self, poses: list[np.ndarray]) -> None:
        """Move through ``poses`` (reset moves, during which the cube may be hidden)."""
        self._moving = True
        try:
            for pose in poses:
                self._state = self.arm.reset(pose)
        finally:
            self._moving = False

    def _lifted(self, q: np.ndarray) -> np.ndarray:
        """Return ``q`` with the fingertips :data:`CLEAR_LIFT` higher (less under the box top)."""
        box = self.cfg.safety
        room = box.workspace_high[2] - box.workspace_margin - fk_position(q)[2] - _LIFT_SPARE
        lift = min(CLEAR_LIFT, room)
        raised = shift_tool(q, (0.0, 0.0, lift), FINGERTIP) if lift > 0.0 else None
        return np.asarray(q, dtype=np.float64) if raised is None else raised

    def step(self, qd: np.ndarray) -> ArmState:
        """Hold joint velocities ``qd`` (rad/s, filtered) for one period, or hold still."""
        self._state = self.arm.step(qd)
        return self._state

    def use_config(self, cfg: EnvWorkerConfig) -> None:
        """Take run-time values: the arm's limits, the gripper's force and speed, ``cell.*``."""
        self.cfg = cfg
        self.arm.use_config(cfg)
        if isinstance(self.gripper, GripperDriver):
            self.gripper.speed_mps = float(cfg.manipulation.grip_speed)
            self.gripper.force_n = float(cfg.manipulation.grip_force)
        self.board.max_age_s = float(cfg.cell.pose_max_age_s)

    def read(self) -> ArmState:
        """Return the arm's current state without moving."""
        return self.arm.read()

    def set_gripper(self, width: float) -> None:
        """Ask for an opening (m) between the pads, clipped to the stroke."""
        self.gripper.command(min(max(float(width), 0.0), STROKE))

    def cell(self) -> CellState:
        """Return the grasp point from the arm's joints, the opening, the newest cube pose."""
        state = self._state if self._state is not None else self.arm.read()
        jac, pose = jacobian(state.q, GRASP_POINT)
        cube = self.board.latest()
        zeros = np.zeros(3)
        return CellState(tcp=pose[:3, 3].copy(), tcp_vel=jac[:3] @ state.qd, tcp_rot=pose[:3, :3],
                         width=self.gripper.width(),
                         cube=cube.position if cube else zeros,
                         cube_quat=cube.quat if cube else np.array([0.0, 0.0, 0.0, 1.0]),
                         cube_vel=cube.velocity if cube else zeros,
                         cube_spin=cube.spin if cube else zeros)

    def show_target(self, target: np.ndarray) -> None:
        """Draw nothing: the target is in the observation and the logs."""

    def render_rgb(self) -> None:
        """Return no frame: watch the arm, or the camera's own stream."""
        return None

    def summary(self) -> dict[str, Any]:
        """Return the arm's summary with the gripper's and the cube pose's counts."""
        return {**self.arm.summary(), 'gripper': self.gripper.summary(),
                'object_pose': self.board.summary()}

    def stop(self) -> None:
        """Bring the arm to a standstill."""
        self.arm.stop()

    def interrupt(self) -> None:
        """Make a hold (the placement wait among them) return at once."""
        self.arm.interrupt()

    def resume(self) -> None:
        """Allow holding again after :meth:`interrupt`."""
        self.arm.resume()

    def close(self) -> None:
        """Stop and release the arm, then the gripper."""
        try:
            self.arm.close()
        finally:
            self.gripper.close()

    # ------------------------------------------------------------------ gate inputs
    def _cube_reason(self) -> str | None:
        """Why the arm must hold for the cube: placement awaited, or a stale pose."""
        now, cfg = self.clock(), self.cfg
        if self._moving:
            return None   # the arm's own reset move may hide the cube from the camera
        if self._placing_since is not None:
            why = self._placement()
            if why is not None and now - self._placing_since > cfg.cell.place_timeout_s:
                raise NeedsPerson(f'put the cube in its start box: {why} after '
                                  f'{cfg.cell.place_timeout_s:g} s')
            return why
        why = self.board.reason()
        if why is None:
            self._usable_at = now
        elif now - self._usable_at > cfg.cell.place_timeout_s:
            raise NeedsPerson(f'{why}, for {now - self._usable_at:.0f} s: check the camera '
                              f'and that the cube is in view ({self.board.summary()})')
        return why

    def _placement(self) -> str | None:
        """Whether the cube rests in its start box (``None``), else what is wrong."""
        stale = self.board.reason()
        if stale is not None:
            return stale
        cube = self.board.latest()
        m = self.cfg.manipulation
        lo = np.asarray(m.object_low) - PLACE_TOLERANCE
        hi = np.asarray(m.object_high) + PLACE_TOLERANCE
        xy = cube.position[:2]
        if np.any(xy < lo) or np.any(xy > hi):
            return (f'the cube is at x {xy[0]:.3f} y {xy[1]:.3f} m, outside its start box x '
                    f'[{m.object_low[0]:g}, {m.object_high[0]:g}] y [{m.object_low[1]:g}, '
                    f'{m.object_high[1]:g}]')
        speed = float(np.linalg.norm(cube.velocity))
        if speed > REST_SPEED:
            return f'the cube moves ({speed:.3f} m/s)'
        return None
