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
The grippers of a physical cell: a 2F-85 through its URCap, or one on a digital output.

:class:`GripperDriver` drives the Robotiq 2F-85 beside the control loop, so that no step
waits on it. The URCap socket answers one request at a time, some only after a quiet gap, so
the control loop never talks to it: :meth:`GripperDriver.command` stores the newest opening
and returns, and the driver's thread sends it (when it moved by a position count or more)
and reads the fingers back, each round. A lost link is a lost link, as for the arm: the
driver reconnects with the backoff of ``rtde.reconnect_*`` while :meth:`GripperDriver.reason`
keeps the arm's policy gate closed (the arm holds still); when the attempts run out, or the
gripper reports a fault, :meth:`~GripperDriver.reason` raises :class:`NeedsPerson` with the
cause.

:class:`DigitalGripper` is the simple alternative (``cell.gripper: digital_output``): one
output of the controller, set through the arm's own ur_rtde link.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from async_rl_ros.core.config import EnvWorkerConfig
from async_rl_ros.core.errors import NeedsPerson
from async_rl_ros.envs.robotiq import (GripperError, GripperFault, GripperLinkError,
                                       RobotiqGripper, width_to_count)
from async_rl_ros.envs.rtde_supervisor import backoff

__all__ = ['GripperDriver', 'DigitalGripper']

_ROUND_S = 0.01   # s: pause between two rounds of the driver's thread


class GripperDriver:
    """
    A Robotiq 2F-85 behind a thread of its own.

    :param connect: returns a connected :class:`RobotiqGripper` (or raises
        :class:`GripperError`).
    :param speed_mps: finger speed of every move.
    :param force_n: grip force of every move.
    :param waits: the backoff (s) between reconnection attempts; its length is the number of
        attempts before a person is asked.
    """

    def __init__(self, connect: Callable[[], RobotiqGripper], speed_mps: float, force_n: float,
                 waits: list[float]):
        self._connect = connect
        self.speed_mps = float(speed_mps)
        self.force_n = float(force_n)
        self.waits = list(waits)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._target: float | None = None   # m: newest opening asked for
        self._sent: int | None = None       # POS count of the move last sent
        self._width: float | None = None    # m: newest opening read back
        self._lost: str | None = None       # why the link is down (reconnecting)
        self._fatal: str | None = None      # why a person is needed
        self.reconnects = 0                 #: links re-established
        self.moves = 0                      #: moves sent
        self._gripper: RobotiqGripper | None = None
        self._thread: threading.Thread | None = None

    @classmethod
    def from_config(cls, cfg: EnvWorkerConfig) -> 'GripperDriver':
        """Drive the gripper on ``rtde.robot_ip`` (``cell.gripper_*``, ``manipulation.grip_*``)."""
        rt, cell = cfg.rtde, cfg.cell

        def connect() -> RobotiqGripper:
            gripper = RobotiqGripper(rt.robot_ip, cell.gripper_port, rt.client_timeout_s,
                                     closed_count=cell.gripper_closed_count)
            gripper.connect()
            return gripper

        return cls(connect, cfg.manipulation.grip_speed, cfg.manipulation.grip_force,
                   list(backoff(rt.reconnect_initial_s, rt.reconnect_max_s,
                                rt.reconnect_attempts)))

    def start(self) -> None:
        """
        Connect, activate the gripper if it is not active, read it, start the thread.

        :raises NeedsPerson: no gripper answers, or it reports a fault.
        """
        try:
            self._open()
        except GripperError as exc:
            raise NeedsPerson(f'the gripper does not work: {exc}') from exc
        self._thread = threading.Thread(target=self._run, name='gripper', daemon=True)
        self._thread.start()

    def command(self, width_m: float) -> None:
        """Ask for an opening (m); returns at once (the driver's thread sends it)."""
        with self._lock:
            self._target = float(width_m)
        self._wake.set()

    def width(self) -> float:
        """Return the newest opening read back (m)."""
        with self._lock:
            return 0.0 if self._width is None else self._width

    def reason(self) -> str | None:
        """
        Return why the arm must hold still for the gripper (link down), or ``None``.

        :raises NeedsPerson: the link could not be re-established, or the gripper has a fault.
        """
        with self._lock:
            if self._fatal is not None:
                raise NeedsPerson(self._fatal)
            return self._lost

    def summary(self) -> dict[str, Any]:
        """Return what a run summary reports: moves sent and links re-established."""
        return {'moves': self.moves, 'reconnects': self.reconnects}

    def close(self) -> None:
        """Stop the thread and close the link (the fingers stay where they are)."""
        self._closing.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
        if self._gripper is not None:
            self._gripper.close()

    # ------------------------------------------------------------------ the thread
    def _open(self) -> None:
        gripper = self._connect()
        try:
            gripper.activate()
            width = gripper.state().width_m
        except BaseException:
            gripper.close()
            raise
        with self._lock:
            self._gripper, self._width, self._sent = gripper, width, None

    def _run(self) -> None:
        while not self._closing.is_set():
            try:
                self._round()
            except GripperFault as exc:
                with self._lock:
                    self._fatal = f'{exc}: a person must check the gripper and reactivate it'
                return
            except GripperLinkError as exc:
                if not self._reconnect(exc.reason):
                    return
            self._wake.wait(_ROUND_S)
            self._wake.clear()

    def _round(self) -> None:
        """Send the newest opening if it changed, then read the fingers back."""
        gripper = self._gripper
        with self._lock:
            target = self._target
        if target is not None:
            count, _ = width_to_count(target, gripper.closed_count)
            if count != self._sent:
                gripper.move(target, self.speed_mps, self.force_n)
                self._sent = count
                self.moves += 1
        width = gripper.state().width_m
        with self._lock:
            self._width = width

    def _reconnect(self, why: str) -> bool:
        """Re-establish the link with backoff; ``False`` (a person is asked) when it fails."""
        if self._gripper is not None:
            self._gripper.close()
        for attempt, wait in enumerate(self.waits, 1):
            with self._lock:
                self._lost = (f'link lost ({why}); reconnecting, attempt {attempt} of '
                              f'{len(self.waits)}')
            if self._closing.wait(wait):
                return False
            try:
                self._open()
            except GripperFault as exc:
                why = str(exc)
                break
            except GripperError as exc:
                why = str(exc)
                continue
            with self._lock:
                self._lost = None
            self.reconnects += 1
            return True
        with self._lock:
            self._fatal = (f'the gripper link could not be re-established ({why}): a person '
                           'must check the gripper and its cable')
        return False


class DigitalGripper:
    """
    A gripper on a standard digital output of the controller: high closes it, low opens it.

    The simple alternative to the 2F-85's URCap (a pneumatic gripper behind a valve, an
    electric one in digital mode). The output goes through the arm's own ur_rtde link, so a
    lost link is the arm's (its supervisor recovers it); an output that could not be set is
    sent again with the next command. It has no position feedback: the opening it reports is
    the commanded one, fully open or closed.

    :param index: the standard digital output (0-7).
    :param stroke: the opening of the open gripper (m).
    """

    def __init__(self, index: int, stroke: float):
        self.index = int(index)
        self.stroke = float(stroke)
        self.arm: Any = None
        self._closed: bool | None = None   # level last set, None: not set (yet, or again)
        self._wanted = False
        self.moves = 0                     #: output changes set

    def attach(self, arm: Any) -> None:
        """Drive the output through ``arm`` (:meth:`UR5RTDE.set_digital_out`)."""
        self.arm = arm

    def start(self) -> None:
        """Open the gripper (the output low)."""
        self.command(self.stroke)

    def command(self, width_m: float) -> None:
        """Close (output high) for an opening below half the stroke, else open."""
        self._wanted = float(width_m) < self.stroke / 2
        if self._wanted != self._closed:
            if self.arm.set_digital_out(self.index, self._wanted):
                self._closed = self._wanted
                self.moves += 1
            else:
                self._closed = None   # unknown: set it with the next command

    def width(self) -> float:
        """Return the commanded opening (m): 0 closed, the stroke open."""
        return 0.0 if self._wanted else self.stroke

    def reason(self) -> str | None:
        """Nothing of its own holds the arm: the output shares the arm's link."""
        return None

    def summary(self) -> dict[str, Any]:
        """Return what a run summary reports: output changes set."""
        return {'moves': self.moves, 'output': self.index}

    def close(self) -> None:
        """Leave the output as it is (opening could drop what the gripper holds)."""
