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
The simulated controller: joint motion, safety state and ur_rtde's control-script registers.

Pure state, no sockets: :mod:`ur_double.server` feeds it the input registers the client
writes and publishes what :meth:`Controller.outputs` returns. Every method takes the lock.
Motion is integrated with real elapsed time (rad, rad/s, s).
"""

from __future__ import annotations

import math
import threading
import time

from async_rl_ros.envs.ur5_kinematics import fk
import numpy as np
import transforms3d

__all__ = ['Controller', 'REALTIME_COMMANDS', 'ROBOT_MODE', 'RUNTIME', 'SAFETY_MODE']

#: Commands the control script processes every cycle, only signalling "ready".
REALTIME_COMMANDS = frozenset({6, 9, 10, 11, 24, 25, 26, 27, 38, 58, 66, 67, 68, 69, 70, 71})
RUNTIME = {'STOPPING': 0, 'STOPPED': 1, 'PLAYING': 2, 'PAUSING': 3, 'PAUSED': 4}
SAFETY_MODE = {'NORMAL': 1, 'PROTECTIVE_STOP': 3, 'ROBOT_EMERGENCY_STOP': 7, 'FAULT': 9}
_SAFETY_BIT = {'NORMAL': 1 << 0, 'PROTECTIVE_STOP': 1 << 2, 'ROBOT_EMERGENCY_STOP': 1 << 6,
               'EMERGENCY_STOPPED': 1 << 7, 'FAULT': 1 << 9}
ROBOT_MODE_RUNNING = 7
ROBOT_MODE = {'POWER_OFF': 3, 'POWER_ON': 4, 'IDLE': 5, 'RUNNING': 7}
MAX_JOINT_SPEED = 3.15     # rad/s: the UR5's joint speed limit (the double never exceeds it)
STOP_DECEL = 10.0          # rad/s^2: a protective or emergency stop (category 1/0)
PROTECTIVE_COOLDOWN = 5.0  # s: a protective stop cannot be unlocked earlier


class Controller:
    """
    A UR5 arm behind a UR controller, at the level ur_rtde sees it.

    :param q: initial joint positions (rad).
    :param version: controller software version (major, minor, bugfix, build).
    :param cooldown_s: time a protective stop must last before it can be unlocked.
    """

    def __init__(self, q: list[float] | None = None,
                 version: tuple[int, int, int, int] = (5, 15, 1, 0),
                 cooldown_s: float = PROTECTIVE_COOLDOWN):
        self.lock = threading.RLock()
        self.version = tuple(int(v) for v in version)
        self.cooldown_s = float(cooldown_s)
        self.frequency = 500.0 if self.version[0] >= 5 else 125.0  # Hz: controller cycle
        self.q = np.array(q if q is not None else [0.0, -1.5708, 1.5708, -1.5708, -1.5708, 0.0])
        self.qd = np.zeros(6)
        self.t0 = time.monotonic()
        self.last = self.t0           # monotonic time of the last cycle's slot
        self.last_run = self.t0       # monotonic time the last cycle ran
        self.stamp = 0.0              # s: the RTDE timestamp of the last cycle (one per cycle)
        self.runtime = RUNTIME['STOPPED']
        self.safety = 'NORMAL'
        self.safety_since = 0.0
        self.remote_control = True
        self.robot_mode = ROBOT_MODE_RUNNING  # powered on, brakes released
        self.ignore_stops = False     # fault: speedStop/servoStop/stopJ/stopScript never finish
        self.refuse_uploads = 0       # fault: this many uploaded scripts do not start
        self.inputs: dict[str, float] = {}
        #: standard digital outputs (bit i: DO i), set by an RTDE client's IO recipe; they
        #: keep their levels across control-script restarts, as on a real controller
        self.digital_out = 0
        self.last_input = 0.0         # monotonic time of the last register write
        self.out_int = [0] * 48
        self.out_double = [0.0] * 48
        self.reg_int = 0              # register offsets of the uploaded script (0 or 24)
        self.reg_float = 0
        # script emulation
        self.mode = 'idle'            # idle | speed | servo | move | stop
        self.target = np.zeros(6)     # speed: qd (rad/s); servo/move: q (rad)
        self.accel = 1.4              # rad/s^2
        self.vel = 1.05               # rad/s (moveJ)
        self.servo_t = 0.008          # s
        self.executing = False        # a regular command is being (or was) processed
        self.busy = False             # a blocking moveJ is in progress
        self.watchdog_hz = 0.0
        self.move_start = np.zeros(6)
        self.move_len = 0.0
        self.move_s = 0.0
        self.move_v = 0.0
        # bookkeeping read by the tests
        self.counts: dict[int, int] = {}
        self.uploads = 0
        self.watchdog_trips = 0
        self.protective_stops = 0
        self.unlocks = 0
        self.max_speed = 0.0
        self.moved_while_stopped = 0.0  # rad travelled while not PLAYING or not NORMAL
        self.log: list[tuple[float, str]] = []  # (controller time, event)

    # ------------------------------------------------------------------ time
    def now(self) -> float:
        """Return the controller time (s since start, whole cycles), the RTDE ``timestamp``."""
        return round((time.monotonic() - self.t0) * self.frequency) / self.frequency

    # ------------------------------------------------------------------ program
    def upload(self, script: str, reg_int: int, reg_float: int) -> None:
        """Start a newly received control script (replaces a running one)."""
        with self.lock:
            self.uploads += 1
            self.log.append((round(self.now(), 3), 'upload'))
            self.reg_int, self.reg_float = reg_int, reg_float
            self._halt_program('STOPPED')
            if self.safety != 'NORMAL' or self.robot_mode != ROBOT_MODE_RUNNING:
                return  # a real controller refuses to start a program while stopped or off
            if self.refuse_uploads > 0:
                self.refuse_uploads -= 1
                self.log.append((round(self.now(), 3), 'upload refused'))
                return
            self.inputs = {}
            self.executing = False
            self.busy = False
            self.watchdog_hz = 0.0
            self.runtime = RUNTIME['PLAYING']
            self._out(0, 1)  # signal_ready()

    def _halt_program(self, state: str) -> None:
        if self.runtime == RUNTIME['PLAYING'] and self.mode not in ('idle', 'stop'):
            self.mode, self.accel = 'stop', STOP_DECEL
        self.runtime = RUNTIME[state]
        self.busy = False
        self.watchdog_hz = 0.0

    def _out(self, index: int, value: int) -> None:
        self.out_int[index + self.reg_int] = value

    def _in_int(self, index: int) -> int:
        return int(self.inputs.get(f'input_int_register_{index + self.reg_int}', 0))

    def _in_double(self, index: int) -> float:
        return float(self.inputs.get(f'input_double_register_{index + self.reg_float}', 0.0))

    def write_inputs(self, values: dict[str, float]) -> None:
        """Store register values written by an RTDE client."""
        with self.lock:
            mask = int(values.pop('standard_digital_output_mask', 0))
            level = int(values.pop('standard_digital_output', 0))
            self.digital_out = (self.digital_out & ~mask) | (level & mask)
            self.inputs.update(values)
            self.last_input = time.monotonic()

    # ------------------------------------------------------------------ faults
    def protective_stop(self, keep_program: bool = False) -> None:
        """
        Trigger a protective stop: motion halts, the program stops.

        :param keep_program: the program stays PLAYING (some controllers pause it instead of
            ending it); it runs no command until the stop is unlocked.
        """
        with self.lock:
            self.protective_stops += 1
            self._enter_safety('PROTECTIVE_STOP', keep_program)

    def emergency_stop(self) -> None:
        """Press the emergency stop: motion halts, the program stops, nothing unlocks it."""
        with self.lock:
            self._enter_safety('ROBOT_EMERGENCY_STOP')

    def release_emergency_stop(self) -> None:
        """Twist the emergency stop button back (a person does this on a real robot)."""
        with self.lock:
            if self.safety == 'ROBOT_EMERGENCY_STOP':
                self.safety = 'NORMAL'

    def power_off(self) -> None:
        """Power the arm off (teach pendant): motion halts, the program stops."""
        with self.lock:
            self.robot_mode = ROBOT_MODE['POWER_OFF']
            self.qd[:] = 0.0
            self.mode = 'idle'
            self._halt_program('STOPPED')

    def power_on(self, release_brakes: bool) -> None:
        """Dashboard ``power on`` (IDLE) or ``brake release`` (RUNNING)."""
        with self.lock:
            self.robot_mode = ROBOT_MODE['RUNNING' if release_brakes else 'IDLE']

    def _enter_safety(self, mode: str, keep_program: bool = False) -> None:
        self.safety = mode
        self.safety_since = time.monotonic()
        self.mode, self.accel = 'stop', STOP_DECEL
        if not keep_program:
            self._halt_program('STOPPED')

    def unlock_protective_stop(self) -> str:
        """Return the dashboard answer to ``unlock protective stop``."""
        with self.lock:
            if self.safety != 'PROTECTIVE_STOP':
                return 'Protective stop releasing' if self.safety == 'NORMAL' else \
                    f'Cannot unlock protective stop, safety status is {self.safety}'
            left = self.cooldown_s - (time.monotonic() - self.safety_since)
            if left > 0.0:
                return (f'Cannot unlock protective stop until {self.cooldown_s:g}s after '
                        'occurrence. Always inspect cause of protective stop before unlocking')
            self.safety = 'NORMAL'
            self.unlocks += 1
            return 'Protective stop releasing'

    # ------------------------------------------------------------------ status
    def safety_bits(self) -> int:
        """Return ``safety_status_bits``."""
        bits = _SAFETY_BIT.get(self.safety, 0)
        if self.safety == 'ROBOT_EMERGENCY_STOP':
            bits |= _SAFETY_BIT['EMERGENCY_STOPPED']
        return bits

    def robot_status_bits(self) -> int:
        """Return ``robot_status_bits``: power on, program running."""
        return 1 | (2 if self.runtime == RUNTIME['PLAYING'] else 0)

    def tcp_pose(self) -> list[float]:
        """Return the flange pose (x, y, z in m, rotation vector in rad)."""
        t = fk(self.q)
        axis, angle = transforms3d.axangles.mat2axangle(t[:3, :3])
        return [*t[:3, 3], *(np.asarray(axis) * angle)]

    # ------------------------------------------------------------------ control cycle
    def tick(self, due: float | None = None) -> None:
        """
        Advance one controller cycle: watchdog, script registers, motion.

        :param due: the monotonic time this cycle was scheduled at (default: now). A cycle
            run late, to catch up after this process was not scheduled, is stamped and
            integrated at its own slot, as a real-time controller would have run it.
        """
        with self.lock:
            now = time.monotonic()
            due = now if due is None else min(due, now)
            stalled = now - self.last_run  # s since the previous cycle ran (> period: we lagged)
            late = now - due               # s this cycle runs after its slot (catching up)
            dt = min(max(due - self.last, 0.0), 0.1)
            self.last, self.last_run = due, now
            # Every cycle gets its own timestamp, as on a real controller: two cycles that a
            # late one bunched into one period of the clock still carry different stamps, so a
            # client can tell their packets apart.
            slot = round((due - self.t0) * self.frequency) / self.frequency
            self.stamp = max(slot, self.stamp + 1.0 / self.frequency)
            playing = self.runtime == RUNTIME['PLAYING']
            # A cycle that comes late (this process was not scheduled) may see the register
            # writes still queued in the socket: judge the watchdog on the next, timely one.
            if playing and self.watchdog_hz > 0.0 and \
                    max(stalled, late) < 0.5 / self.watchdog_hz and \
                    now - self.last_input > 1.0 / self.watchdog_hz:
                self.watchdog_trips += 1
                self.log.append((round(self.now(), 3), 'watchdog'))
                self._halt_program('STOPPED')
                playing = False
            if playing and self.safety == 'NORMAL':
                self._script_cycle()
            self._integrate(dt)

    def _script_cycle(self) -> None:
        if self.busy:
            if self.mode != 'move':
                self.busy = False
                self._out(0, 2)  # signal_done_with_cmd() after a blocking move
            return
        cmd = self._in_int(0)
        if cmd in REALTIME_COMMANDS:
            self._count(cmd)
            self._realtime(cmd)
            self._out(0, 1)
        elif cmd == 0:
            self.executing = False
            self._out(0, 1)
        elif cmd in (15, 16, 34, 255) and self.ignore_stops:
            self._count(cmd)   # fault: the stop is never done (ur_rtde waits for it)
            self.executing = True
        elif not self.executing:
            self._count(cmd)
            self.executing = True
            self._regular(cmd)

    def _count(self, cmd: int) -> None:
        self.counts[cmd] = self.counts.get(cmd, 0) + 1

    def _vector(self) -> np.ndarray:
        return np.array([self._in_double(i) for i in range(6)])

    def _realtime(self, cmd: int) -> None:
        if cmd == 9:      # speedJ: qd d0-5, a d6, t d7
            self.mode = 'speed'
            self.target = self._vector()
            self.accel = max(self._in_double(6), 1e-3)
        elif cmd == 11:   # servoJ: q d0-5, v d6, a d7, t d8, lookahead d9, gain d10
            self.mode = 'servo'
            self.target = self._vector()
            self.servo_t = max(self._in_double(8), 0.002)

    def _regular(self, cmd: int) -> None:
        done = True
        if cmd == 1:                   # moveJ: q d0-5, v d6, a d7, async i1
            self._start_move(self._vector(), self._in_double(6), self._in_double(7))
            done = bool(self._in_int(1))
            self.busy = not done
        elif cmd in (15, 16, 34):      # speedStop / servoStop (a d0), stopJ (a d0, async i1)
            self.mode = 'stop'
            self.accel = max(self._in_double(0), 0.5)
        elif cmd == 35:                # setWatchdog: minimum frequency d0
            self.log.append((round(self.now(), 3), 'set_watchdog'))
            self.watchdog_hz = max(self._in_double(0), 0.0)
            self.last_input = time.monotonic()
        elif cmd == 255:               # stopScript
            self._halt_program('STOPPED')
            return
        if done:
            self._out(0, 2)

    def _start_move(self, q: np.ndarray, v: float, a: float) -> None:
        self.mode = 'move'
        self.move_start = self.q.copy()
        self.target = q
        self.move_len = float(np.max(np.abs(q - self.q)))
        self.move_s = 0.0
        self.move_v = 0.0
        self.vel = min(max(v, 1e-3), MAX_JOINT_SPEED)
        self.accel = max(a, 1e-3)

    def _integrate(self, dt: float) -> None:
        moving_allowed = self.runtime == RUNTIME['PLAYING'] and self.safety == 'NORMAL' and \
            self.robot_mode == ROBOT_MODE_RUNNING
        if not moving_allowed and self.mode not in ('idle', 'stop'):
            self.mode, self.accel = 'stop', STOP_DECEL
        if self.safety != 'NORMAL':
            self.qd[:] = 0.0  # a safety stop brakes at once (stop category 0/1, idealized)
            self.mode = 'idle'
        if self.mode == 'speed':
            step = self.accel * dt
            self.qd = self.qd + np.clip(self.target - self.qd, -step, step)
        elif self.mode == 'stop' or self.mode == 'idle':
            step = self.accel * dt
            self.qd = self.qd - np.clip(self.qd, -step, step)
            if not self.qd.any():
                self.mode = 'idle'
        elif self.mode == 'servo':
            self.qd = (self.target - self.q) / max(self.servo_t, dt)
        elif self.mode == 'move':
            self._move_profile(dt)
            return
        self.qd = np.clip(self.qd, -MAX_JOINT_SPEED, MAX_JOINT_SPEED)
        self._advance(dt)

    def _move_profile(self, dt: float) -> None:
        """Trapezoidal synchronous joint move along the straight joint-space line."""
        remaining = self.move_len - self.move_s
        if remaining <= 1e-9 or self.move_len <= 1e-9:
            self.q = self.target.copy()
            self.qd[:] = 0.0
            self.mode = 'idle'
            return
        brake = self.move_v * self.move_v / (2.0 * self.accel)
        if brake >= remaining:
            self.move_v = max(self.move_v - self.accel * dt, self.accel * dt)
        else:
            self.move_v = min(self.move_v + self.accel * dt, self.vel)
        self.move_s = min(self.move_s + self.move_v * dt, self.move_len)
        frac = self.move_s / self.move_len
        q_new = self.move_start + frac * (self.target - self.move_start)
        self.qd = (q_new - self.q) / dt if dt > 0 else np.zeros(6)
        self.q = q_new
        self.max_speed = max(self.max_speed, float(np.max(np.abs(self.qd))))

    def _advance(self, dt: float) -> None:
        dq = self.qd * dt
        if self.runtime != RUNTIME['PLAYING'] or self.safety != 'NORMAL':
            self.moved_while_stopped += float(np.max(np.abs(dq)))
        self.q = self.q + dq
        self.max_speed = max(self.max_speed, float(np.max(np.abs(self.qd))))

    # ------------------------------------------------------------------ outputs
    def outputs(self) -> dict[str, object]:
        """Return the current value of every output variable the double knows."""
        with self.lock:
            pose = self.tcp_pose()
            values: dict[str, object] = {
                'timestamp': self.stamp,
                'actual_q': list(self.q), 'target_q': list(self.q),
                'actual_qd': list(self.qd), 'target_qd': list(self.qd),
                'actual_TCP_pose': pose, 'target_TCP_pose': pose,
                'robot_mode': self.robot_mode, 'joint_mode': [255] * 6,
                'safety_mode': SAFETY_MODE[self.safety],
                'safety_status': SAFETY_MODE[self.safety],
                'runtime_state': self.runtime,
                'robot_status_bits': self.robot_status_bits(),
                'safety_status_bits': self.safety_bits(),
                'speed_scaling': 1.0, 'target_speed_fraction': 1.0,
                'actual_main_voltage': 48.0, 'actual_robot_voltage': 48.0,
                'joint_temperatures': [30.0] * 6, 'actual_joint_voltage': [48.0] * 6,
                'actual_digital_output_bits': self.digital_out,
            }
            for i, v in enumerate(self.out_int):
                values[f'output_int_register_{i}'] = v
            for i, v in enumerate(self.out_double):
                values[f'output_double_register_{i}'] = v
            return values

    def snapshot(self) -> dict[str, object]:
        """Return what the tests inspect (JSON-friendly)."""
        with self.lock:
            return {'q': [float(x) for x in self.q], 'qd': [float(x) for x in self.qd],
                    'runtime_state': self.runtime, 'safety': self.safety,
                    'robot_mode': self.robot_mode,
                    'mode': self.mode, 'watchdog_hz': self.watchdog_hz,
                    'target': [float(x) for x in self.target],  # speedJ qd / servoJ, moveJ q
                    'counts': {str(k): v for k, v in self.counts.items()},
                    'uploads': self.uploads, 'watchdog_trips': self.watchdog_trips,
                    'protective_stops': self.protective_stops, 'unlocks': self.unlocks,
                    'max_speed': self.max_speed,
                    'moved_while_stopped': self.moved_while_stopped,
                    'speed': float(math.sqrt(float(np.dot(self.qd, self.qd)))),
                    'log': self.log[-20:], 'command_register': self._in_int(0),
                    'script_state': self.out_int[self.reg_int],
                    'digital_out': self.digital_out}
