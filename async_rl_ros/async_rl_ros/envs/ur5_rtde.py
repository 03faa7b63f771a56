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
The physical UR5 as an :class:`~async_rl_ros.envs.arm.ArmBackend`, through ur_rtde.

``RTDEControlInterface`` sends the commands, ``RTDEReceiveInterface`` reads the state and
``DashboardClient`` unlocks protective stops. Each RL step sends one ``speedJ`` (or ``servoJ``)
and waits the step out in controller periods with ``initPeriod``/``waitPeriod``; a reset is an
asynchronous ``moveJ`` to the start pose during which the watchdog keeps being kicked.

The safety supervisor runs around every call (rules in :mod:`async_rl_ros.envs.rtde_supervisor`):

* the ur_rtde watchdog is armed, so the controller stops the arm when the worker stalls;
* before and after each command the controller status is classified: a protective stop is
  logged (too many within the window raise :class:`NeedsPerson`), waited out, unlocked through
  the dashboard, the control script re-uploaded; a stopped program is restarted; a lost link
  is re-established with exponential backoff; an emergency stop or safety fault halts the
  worker with :class:`NeedsPerson` and is never recovered automatically;
* no command is sent on an observation older than one control period, nor after any recovery:
  the step is returned with the fresh state and :attr:`UR5RTDE.interrupted` set (the env then
  truncates the episode);
* while the :class:`PolicyGate` is closed the arm holds still (``speedStop``);
* any exception (``KeyboardInterrupt`` included) and :meth:`UR5RTDE.close` end with
  ``speedStop`` then ``stopScript``.

The commands have passed the env's :class:`SafetyFilter` already; the reset targets are checked
here against the same joint limits and workspace box.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from typing import Any, Callable, Iterator

from async_rl_ros.core.config import ConfigError, EnvWorkerConfig
from async_rl_ros.envs.arm import ArmState, rotvec_to_quat
from async_rl_ros.envs.rtde_supervisor import (backoff, classify, NeedsPerson, PolicyGate,
                                               ProtectiveStopLog, StateClock, Verdict)
from async_rl_ros.envs.safety import SafetyFilter
from async_rl_ros.envs.ur5_kinematics import fk_position
import numpy as np

__all__ = ['UR5RTDE', 'NeedsPerson', 'import_ur_rtde']

_LOG = logging.getLogger(__name__)
_REST_SPEED = 1e-3      # rad/s: below this on every joint the arm counts as at rest
_REST_ERROR = 2e-3      # rad: reset target reached
_PROGRAM_TIMEOUT = 5.0  # s: wait for the re-uploaded control script to run
_UNLOCK_TIMEOUT = 10.0  # s: retries of a refused unlock after the cool-down
_FRESH_TIMEOUT = 1.0    # s: wait for a fresh sample before declaring the link lost


def import_ur_rtde() -> tuple[Any, Any, Any]:
    """Return the ``rtde_control``, ``rtde_receive`` and ``dashboard_client`` modules."""
    try:
        import dashboard_client
        import rtde_control
        import rtde_receive
    except ImportError as exc:
        raise RuntimeError(f'backend ur5 needs the ur_rtde client ({exc}): '
                           'pip install ur-rtde==1.6.5') from None
    return rtde_control, rtde_receive, dashboard_client


def controller_major(version_text: str) -> int:
    """Return the major version from a dashboard ``PolyscopeVersion`` answer (3 or 5)."""
    match = re.search(r'(\d+)\.(\d+)\.(\d+)', version_text)
    if match is None:
        raise RuntimeError(f'cannot read the controller version from {version_text!r}')
    return int(match.group(1))


class UR5RTDE:
    """
    A physical UR5 behind a UR controller (CB3 or e-Series), supervised.

    :param cfg: worker configuration (``rtde.*``, ``task.control_hz``, ``safety.*``).
    :param gate: policy gate the transport feeds; ``None`` lets every command through (tests,
        evaluation of a fixed policy).
    :param sleep: interruptible wait (s); injectable for tests.
    """

    def __init__(self, cfg: EnvWorkerConfig, gate: PolicyGate | None = None,
                 sleep: Callable[[float], None] | None = None):
        self.cfg = cfg
        self.rt = cfg.rtde
        self.ip = cfg.rtde.robot_ip
        self.dt = cfg.task.dt
        self.frequency = float(cfg.rtde.frequency)
        self.substeps = max(1, int(round(self.dt * self.frequency)))
        self.scale = float(cfg.rtde.speed_scaling)
        self.gate = gate
        self.filter = SafetyFilter(cfg.safety, self.dt)
        self.stops = ProtectiveStopLog(cfg.rtde.protective_stop_limit,
                                       cfg.rtde.protective_stop_window_s,
                                       cfg.rtde.protective_stop_cooldown_s)
        self.clock = StateClock()
        self.interrupted: str | None = None   #: why the last step/reset did not run as asked
        self._servo_target: np.ndarray | None = None  # rad: last servoJ target
        self._step_end: float | None = None   # monotonic s: end of the current RL step
        self.events: list[tuple[float, str, str]] = []  #: (time, kind, detail) of each fault
        self.halted = False
        self._closing = threading.Event()
        self._interrupted = threading.Event()  # set by interrupt(): stop holding, return
        self._lock = threading.RLock()
        self._sleep = sleep or self._interruptible_sleep
        self._control_mod, self._receive_mod, self._dashboard_mod = import_ur_rtde()
        self.receive: Any = None
        self.control: Any = None
        self.dashboard: Any = None
        self.series = 'e-Series'
        try:
            self._connect()
        except BaseException:
            self._halt()
            self._disconnect()
            raise

    # ------------------------------------------------------------------ connection
    def _connect(self) -> None:
        self.dashboard = self._dashboard_mod.DashboardClient(self.ip)
        self.dashboard.connect()
        version = self.dashboard.polyscopeVersion()
        major = controller_major(version)
        self.series = 'e-Series' if major >= 5 else 'CB3'
        if major < 5 and self.frequency > 125.0:
            raise ConfigError('rtde.frequency', self.frequency,
                              f'125 on a CB3 controller (it reports version {version})')
        if major >= 5 and not self.dashboard.isInRemoteControl():
            raise NeedsPerson('the e-Series controller is in local control: switch the teach '
                              'pendant to Remote Control (top right corner) and restart')
        self.receive = self._receive_mod.RTDEReceiveInterface(self.ip, self.frequency)
        state = self._wait_fresh(_FRESH_TIMEOUT)
        if state is None:
            raise RuntimeError(f'no RTDE data from {self.ip} within {_FRESH_TIMEOUT:g} s')
        verdict, why = self._verdict(control_connected=True)
        if verdict is Verdict.HALT:
            raise NeedsPerson(f'{why}: a person must clear it on the teach pendant first')
        if verdict is Verdict.PROTECTIVE_STOP:
            self._unlock_protective_stop()
        self.control = self._control_mod.RTDEControlInterface(self.ip, self.frequency)
        self._arm_program()
        _LOG.info('connected to the %s controller at %s (%g Hz, %s)', self.series, self.ip,
                  self.frequency, self.rt.control_mode)

    def _arm_program(self) -> None:
        """Set up a freshly started control script: flange TCP, watchdog."""
        self.control.setTcp([0.0] * 6)
        if not self.control.setWatchdog(self.rt.watchdog_min_hz):
            raise RuntimeError('setWatchdog failed: the control script is not running')

    def _disconnect(self) -> None:
        for client in (self.control, self.receive):
            if client is not None:
                try:
                    client.disconnect()
                except RuntimeError:
                    pass
        if self.dashboard is not None:
            try:
                self.dashboard.disconnect()
            except RuntimeError:
                pass

    # ------------------------------------------------------------------ ArmBackend
    def reset(self, q: np.ndarray) -> ArmState:
        """Move (``moveJ``) to the start pose ``q`` (rad) and return the state at rest there."""
        with self._guard():
            q = np.asarray(q, dtype=np.float64)
            reasons = []
            for _ in range(self.rt.protective_stop_limit + 2):
                reason = self._ensure_ready()
                reason = self._hold_while_gated() or reason
                if reason:
                    reasons.append(reason)
                state = self._require_fresh()
                self._check_reset_path(state.q, q)
                if self._move_to(q):
                    break
            else:
                raise NeedsPerson('the reset move was interrupted again and again: '
                                  + '; '.join(reasons))
            self.interrupted = None
            self._servo_target = None
            state = self._require_fresh()
            self.filter.reset()
            return state

    def step(self, qd: np.ndarray) -> ArmState:
        """Hold joint velocities ``qd`` (rad/s, already filtered) for one control period."""
        with self._guard():
            self.interrupted = None
            reason = self._ensure_ready() or self._hold_while_gated()
            state = self.read()
            if reason is None and self.clock.age(time.monotonic()) > self.dt:
                reason = 'stale controller state'
                self._stop_motion()
                self.events.append((time.monotonic(), 'stale', reason))
            if reason is not None:
                # No command this step: return a state read after the recovery or the hold.
                self.interrupted = reason
                self._servo_target = None
                return self._require_fresh()
            ok = self._command(np.asarray(qd, dtype=np.float64), state)
            self._wait_step()
            reason = self._ensure_ready()
            if reason is None and not ok:
                reason = 'command refused by the controller'
            state = self.read()
            if reason is None and self.clock.age(time.monotonic()) > self.dt:
                reason = 'stale controller state'
                self._stop_motion()  # the next command would act on an old observation
                self.events.append((time.monotonic(), 'stale', reason))
            self.interrupted = reason
            if reason:
                self._servo_target = None
                return self._require_fresh()
            return state

    def read(self) -> ArmState:
        """Return the newest controller sample (and record its age)."""
        r = self.receive
        stamp = float(r.getTimestamp())
        q = np.asarray(r.getActualQ(), dtype=np.float64)
        qd = np.asarray(r.getActualQd(), dtype=np.float64)
        pose = np.asarray(r.getActualTCPPose(), dtype=np.float64)
        if q.shape != (6,) or pose.shape != (6,):
            raise RuntimeError('the receive interface returned no state (link down?)')
        self.clock.observe(stamp, time.monotonic())
        return ArmState(q=q, qd=qd, ee_pos=pose[:3], ee_quat=rotvec_to_quat(pose[3:]),
                        stamp=stamp)

    def use_config(self, cfg: EnvWorkerConfig) -> None:
        """
        Take run-time limits (``rtde.speed_scaling``, accelerations, reset speed, ...).

        The env decides when: tightened values at once, looser ones and a new control
        period only between episodes. The read-only ``rtde.*`` (connection, watchdog,
        protective-stop log, policy gate) keep the values the backend was built with.
        """
        with self._lock:
            self.rt = cfg.rtde
            self.scale = float(cfg.rtde.speed_scaling)
            self.dt = cfg.task.dt
            self.substeps = max(1, int(round(self.dt * self.frequency)))
            self.filter = SafetyFilter(cfg.safety, self.dt)

    def stop(self) -> None:
        """Bring the arm to a standstill (``speedStop``/``servoStop``)."""
        with self._lock:
            self._stop_motion()

    def interrupt(self) -> None:
        """
        Make a step that is holding still (policy gate, cool-down) raise at once; any thread.

        For a transport that stops stepping (lifecycle deactivate) while the arm may be held
        by the gate; the arm stays stopped, the connection stays up. :meth:`resume` clears it.
        """
        self._interrupted.set()

    def resume(self) -> None:
        """Let steps hold and wait again after :meth:`interrupt`."""
        self._interrupted.clear()

    def close(self) -> None:
        """``speedStop``, ``stopScript`` and disconnect; safe to call twice, from any thread."""
        self._closing.set()
        with self._lock:
            self._halt()
            self._disconnect()
            self.control = self.receive = self.dashboard = None

    def __enter__(self) -> 'UR5RTDE':
        """Use as a context manager: :meth:`close` on exit."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the connection (after ``speedStop`` and ``stopScript``)."""
        self.close()

    # ------------------------------------------------------------------ commands
    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """Serialize calls; on any exception (SIGINT included) speedStop, then stopScript."""
        with self._lock:
            if self._closing.is_set() or self.control is None:
                raise RuntimeError('the ur5 backend is closed')
            if self.halted:
                raise NeedsPerson('the arm was halted; a person must restart the worker')
            try:
                yield
            except BaseException:
                self._halt()
                raise

    def _command(self, qd: np.ndarray, state: ArmState) -> bool:
        v = qd * self.scale
        try:
            if self.rt.control_mode == 'servoj':
                # Integrate the position targets (the trajectory the safety filter approved),
                # anchored at the measured joints after every reset or interruption.
                anchor = state.q if self._servo_target is None else self._servo_target
                self._servo_target = anchor + v * self.dt
                return bool(self.control.servoJ(list(self._servo_target), 0.0, 0.0, self.dt,
                                                self.rt.servoj_lookahead, self.rt.servoj_gain))
            return bool(self.control.speedJ(list(v), self.rt.acceleration, self.dt))
        except RuntimeError as exc:
            _LOG.warning('command failed: %s', exc)
            return False

    def _wait_step(self) -> None:
        """
        Wait for the end of the RL step, in controller periods (initPeriod/waitPeriod).

        Steps keep a fixed cadence of ``task.dt``: the time the supervisor and the env spend
        comes out of the wait (the cadence restarts after a longer interruption).
        """
        c = self.control
        now = time.monotonic()
        if self._step_end is None or now - self._step_end > self.dt:
            self._step_end = now  # first step, or after a pause: restart the cadence
        self._step_end += self.dt
        period = 1.0 / self.frequency
        tick = c.initPeriod()
        while time.monotonic() < self._step_end - 0.5 * period:
            c.waitPeriod(tick)
            tick = c.initPeriod()

    def _stop_motion(self) -> None:
        self._servo_target = None
        c = self.control
        if c is None:
            return
        try:
            if self.rt.control_mode == 'servoj':
                c.servoStop(self.rt.acceleration)
            else:
                c.speedStop(self.rt.acceleration)
        except RuntimeError as exc:
            _LOG.warning('stop failed: %s', exc)

    def _halt(self) -> None:
        """``speedStop`` then ``stopScript``; never raises."""
        c = self.control
        if c is None:
            return
        try:
            if c.isConnected() and c.isProgramRunning():
                self._stop_motion()
                c.stopScript()
        except RuntimeError as exc:
            _LOG.warning('halt: %s', exc)

    def _move_to(self, q: np.ndarray) -> bool:
        """Asynchronous moveJ to ``q``; kick the watchdog until at rest there. False if cut."""
        c = self.control
        speed = self.rt.reset_speed * self.scale
        state = self.read()
        distance = float(np.max(np.abs(q - state.q)))
        if distance < _REST_ERROR:
            return True
        if not c.moveJ(list(q), speed, self.rt.reset_acceleration, True):
            return False
        limit = 3.0 * (distance / speed + speed / self.rt.reset_acceleration) + 2.0
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            self._sleep(5.0 * (1.0 / self.frequency) + 0.01)
            c.kickWatchdog()
            verdict, why = self._verdict()
            if verdict is not Verdict.RUN:
                self.events.append((time.monotonic(), 'reset_interrupted', why))
                return False
            state = self.read()
            if float(np.max(np.abs(q - state.q))) < _REST_ERROR and \
                    float(np.max(np.abs(state.qd))) < _REST_SPEED:
                return True
        self._stop_motion()
        raise RuntimeError(f'the reset moveJ did not reach {np.round(q, 3).tolist()} within '
                           f'{limit:.1f} s')

    def _check_reset_path(self, q0: np.ndarray, q1: np.ndarray) -> None:
        """Refuse a reset target outside the limits or a joint-space path leaving the box."""
        f = self.filter
        for i, (x, lo, hi) in enumerate(zip(q1, f.q_low, f.q_high)):
            if not lo <= x <= hi:
                raise NeedsPerson(f'reset target joint {i} = {x:.3f} rad is outside the safety '
                                  f'limits [{lo:.3f}, {hi:.3f}]')
        allowed = f.violation(fk_position(q0)) + 1e-9
        for s in np.linspace(0.0, 1.0, 33)[1:]:
            p = fk_position(q0 + s * (q1 - q0))
            if f.violation(p) > allowed:
                raise NeedsPerson(
                    f'the moveJ from {np.round(q0, 3).tolist()} to {np.round(q1, 3).tolist()} '
                    f'would take the flange to {tuple(round(x, 3) for x in p)} m, outside the '
                    'safety box: jog the arm back by hand (freedrive) before restarting')

    # ------------------------------------------------------------------ supervision
    def _verdict(self, control_connected: bool | None = None) -> tuple[Verdict, str]:
        r, c = self.receive, self.control
        try:
            connected = r is not None and r.isConnected() and (
                control_connected if control_connected is not None
                else c is not None and c.isConnected())
            bits = int(r.getSafetyStatusBits()) if connected else 0
            runtime = int(r.getRuntimeState()) if connected else 0
        except RuntimeError:
            connected, bits, runtime = False, 0, 0
        return classify(connected, bits, runtime)

    def _ensure_ready(self) -> str | None:
        """Recover until the controller runs; return what was recovered (None: nothing)."""
        first = None
        for _ in range(8):
            verdict, why = self._verdict()
            if verdict is Verdict.RUN:
                return first
            first = first or why
            self.events.append((time.monotonic(), verdict.value, why))
            _LOG.warning('supervisor: %s', why)
            if verdict is Verdict.HALT:
                self.halted = True
                raise NeedsPerson(f'{why}: the arm is halted and will not recover by itself. '
                                  'A person must inspect the cell, release the stop on the '
                                  'teach pendant and restart the worker.')
            if verdict is Verdict.PROTECTIVE_STOP:
                self._recover_protective_stop()
            elif verdict is Verdict.PROGRAM_STOPPED:
                self._restart_program()
            else:
                self._reconnect()
        raise NeedsPerson(f'the controller does not recover ({first}); a person must check it')

    def _recover_protective_stop(self) -> None:
        self._stop_motion()
        try:
            self.stops.record(time.monotonic())
        except NeedsPerson:
            self.halted = True
            raise
        self._unlock_protective_stop()
        self._restart_program()

    def _unlock_protective_stop(self) -> None:
        self._sleep(self.stops.cooldown_left(time.monotonic()))
        deadline = time.monotonic() + _UNLOCK_TIMEOUT
        while True:
            try:
                self.dashboard.unlockProtectiveStop()
                break
            except RuntimeError as exc:
                if 'until' not in str(exc) or time.monotonic() > deadline:
                    raise NeedsPerson(f'the protective stop cannot be unlocked ({exc}); a '
                                      'person must check the robot') from None
                self._sleep(0.2)  # the controller's cool-down is longer than configured
        self.dashboard.closeSafetyPopup()
        self.events.append((time.monotonic(), 'unlocked', 'protective stop unlocked'))
        deadline = time.monotonic() + _PROGRAM_TIMEOUT
        while self.receive.isProtectiveStopped():
            if time.monotonic() > deadline:
                raise NeedsPerson('the protective stop stays on after the unlock')
            self._sleep(0.01)

    def _restart_program(self) -> None:
        c = self.control
        if not c.isProgramRunning():
            c.reuploadScript()
        deadline = time.monotonic() + _PROGRAM_TIMEOUT
        while not c.isProgramRunning():
            if time.monotonic() > deadline:
                raise RuntimeError('the re-uploaded control script does not start')
            self._sleep(0.01)
        self._arm_program()
        self.events.append((time.monotonic(), 'program_restarted', 'control script running'))

    def _reconnect(self) -> None:
        """Re-establish both RTDE links with exponential backoff, then wait for fresh data."""
        self.clock.reset()
        rt = self.rt
        attempt = 0
        for delay in backoff(rt.reconnect_initial_s, rt.reconnect_max_s, rt.reconnect_attempts):
            attempt += 1
            self._sleep(delay)
            try:
                # Always: after a failed attempt the receive interface may claim to be
                # connected while its data thread is gone.
                if not self.receive.reconnect():
                    continue
                if not self.control.reconnect():
                    continue
                try:
                    self.dashboard.disconnect()
                except RuntimeError:
                    pass
                self.dashboard.connect()
            except RuntimeError as exc:
                _LOG.warning('reconnect attempt %d failed: %s', attempt, exc)
                continue
            if self._wait_fresh(_FRESH_TIMEOUT) is None:
                continue
            self.events.append((time.monotonic(), 'reconnected', f'after {attempt} attempts'))
            self._restart_program()  # running (re-uploaded if needed) and the watchdog armed
            return
        self.halted = True
        raise NeedsPerson(f'lost the connection to {self.ip} and {attempt} reconnection '
                          'attempts failed: check the network and the controller')

    def _wait_fresh(self, timeout: float) -> ArmState | None:
        """Poll until a sample younger than one control period arrives; None on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                state = self.read()
                if self.clock.age(time.monotonic()) <= self.dt:
                    return state
            except RuntimeError:
                pass
            if time.monotonic() > deadline:
                return None
            self._sleep(0.5 / self.frequency)

    def _require_fresh(self) -> ArmState:
        """Return a fresh sample, reconnecting when none comes."""
        for _ in range(3):
            state = self._wait_fresh(_FRESH_TIMEOUT)
            if state is not None:
                return state
            self.events.append((time.monotonic(), 'stale', 'no fresh controller data'))
            self._stop_motion()
            self._reconnect()
        raise NeedsPerson(f'no fresh data from {self.ip} even after reconnecting')

    def _hold_while_gated(self) -> str | None:
        """Hold still (speedStop, watchdog kicked) while the policy gate is closed."""
        gate = self.gate
        if gate is None:
            return None
        first = gate.reason()
        if first is None:
            return None
        self.events.append((time.monotonic(), 'policy_gate', first))
        _LOG.warning('holding still: %s', first)
        self._stop_motion()
        while gate.wait_open(0.05) is not None:
            if self._closing.is_set() or self._interrupted.is_set():
                raise RuntimeError('the ur5 backend was closed or interrupted while holding')
            self.control.kickWatchdog()
            self._ensure_ready()
        return 'policy gate: ' + first

    def _interruptible_sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0.0:
            if self._closing.wait(min(left, 0.05)) or self._interrupted.is_set():
                raise RuntimeError('the ur5 backend was closed or interrupted')
