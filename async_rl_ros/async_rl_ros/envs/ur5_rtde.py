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
``DashboardClient`` unlocks protective stops. They run in a child process
(:mod:`async_rl_ros.envs.rtde_link`): a native crash of ur_rtde (it segfaults after a link
stall of a few seconds) reads as a lost link, never kills the worker. Each RL step sends one
``speedJ`` (or ``servoJ``) and waits the step out in controller periods; a reset is an
asynchronous ``moveJ`` to the start pose during which the watchdog keeps being kicked.

The safety supervisor runs around every call (rules in :mod:`async_rl_ros.envs.rtde_supervisor`,
recovery in :mod:`async_rl_ros.envs.rtde_recovery`):

* the ur_rtde watchdog is armed, so the controller stops the arm when the worker stalls;
* before and after each command the controller status is classified: a protective stop is
  logged (too many within the window raise :class:`NeedsPerson`), waited out, unlocked through
  the dashboard, the control script re-uploaded; a stopped program is restarted; a lost link
  (or a dead or silent client process) is re-established in a fresh client process with
  exponential backoff; an emergency stop, a safety fault or an arm that is not powered on
  (robot mode not RUNNING) halts the worker with :class:`NeedsPerson`, never recovered;
* no command is sent on an observation older than one control period, nor after any recovery:
  the step is returned with the fresh state and :attr:`UR5RTDE.interrupted` set (the env then
  truncates the episode); :attr:`UR5RTDE.interruptions` counts them by kind;
* while the :class:`PolicyGate` is closed the arm holds still (``speedStop``);
* a stop is confirmed: a refused ``speedStop`` is retried, then the program is stopped through
  the dashboard and :class:`NeedsPerson` raised; a stop that cannot reach the controller is
  reported (the controller's watchdog stops the arm);
* any exception (``KeyboardInterrupt`` included) and :meth:`UR5RTDE.close` end with
  ``speedStop`` then ``stopScript``; when that cannot be confirmed, the exception becomes a
  :class:`NeedsPerson`.

The commands have passed the env's :class:`SafetyFilter` already; the reset targets are checked
here against the same joint limits and workspace box.
"""

from __future__ import annotations

import collections
import contextlib
import importlib.util
import logging
import threading
import time
from typing import Any, Callable, Iterator

from async_rl_ros.core.config import EnvWorkerConfig
from async_rl_ros.envs.arm import ArmState, rotvec_to_quat
from async_rl_ros.envs.rtde_link import ClientProcess, LinkLost
from async_rl_ros.envs.rtde_recovery import (BackendInterrupted, Cause, controller_major,
                                             Recovery)
from async_rl_ros.envs.rtde_supervisor import (classify, NeedsPerson, PolicyGate,
                                               ProtectiveStopLog, RUNTIME_PLAYING, StateClock,
                                               Verdict)
from async_rl_ros.envs.safety import SafetyFilter
from async_rl_ros.envs.ur5_kinematics import fk_position
import numpy as np

__all__ = ['UR5RTDE', 'NeedsPerson', 'import_ur_rtde', 'controller_major']

_LOG = logging.getLogger(__name__)
_REST_SPEED = 1e-3      # rad/s: below this on every joint the arm counts as at rest
_REST_ERROR = 2e-3      # rad: reset target reached
_STOP_ATTEMPTS = 3      # refused speedStop/stopScript are retried this often
_STOP_CONFIRM = 0.5     # s: wait for the program to end after stopScript
_STALE = 'stale data', 'stale controller state'


def import_ur_rtde() -> tuple[Any, Any, Any]:
    """Return the ``rtde_control``, ``rtde_receive`` and ``dashboard_client`` modules."""
    _check_ur_rtde()
    import dashboard_client
    import rtde_control
    import rtde_receive
    return rtde_control, rtde_receive, dashboard_client


def _check_ur_rtde() -> None:
    """Fail early, in words, without the client (it is loaded in the client process only)."""
    missing = [m for m in ('rtde_control', 'rtde_receive', 'dashboard_client')
               if importlib.util.find_spec(m) is None]
    if missing:
        raise RuntimeError(f'backend ur5 needs the ur_rtde client (no module '
                           f'{", ".join(missing)}): pip install ur-rtde==1.6.5')


def _floats(values: Any) -> list[float]:
    return [float(x) for x in values]


class UR5RTDE(Recovery):
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
        self.interruption: str | None = None  #: kind of that interruption (INTERRUPTION_KINDS)
        #: interrupted (truncated) steps by kind, for the run's summary
        self.interruptions: collections.Counter[str] = collections.Counter()
        self.stop_failures = 0                #: stops that could not be confirmed (reported)
        self._servo_target: np.ndarray | None = None  # rad: last servoJ target
        self._step_end: float | None = None   # monotonic s: end of the current RL step
        self.events: list[tuple[float, str, str]] = []  #: (time, kind, detail) of each fault
        self.halted = False
        self._closing = threading.Event()
        self._interrupted = threading.Event()  # set by interrupt(): stop holding, return
        self._lock = threading.RLock()
        self._sleep = sleep or self._interruptible_sleep
        self._runtime = 0                     # runtime_state of the newest sample
        self._sample: tuple | None = None     # the verdict's sample, until the next request
        self._control_up = False              # the link's control interface was started
        self.link: ClientProcess | None = None
        self.series = 'e-Series'
        _check_ur_rtde()
        try:
            self._open_link()
            _LOG.info('connected to the %s controller at %s (%g Hz, %s; client pid %d)',
                      self.series, self.ip, self.frequency, self.rt.control_mode,
                      self.link.pid)
        except BaseException:
            self._halt()
            self._drop_link()
            raise

    # ------------------------------------------------------------------ ArmBackend
    def reset(self, q: np.ndarray) -> ArmState:
        """Move (``moveJ``) to the start pose ``q`` (rad) and return the state at rest there."""
        with self._guard():
            q = np.asarray(q, dtype=np.float64)
            reasons = []
            for _ in range(self.rt.protective_stop_limit + 2):
                cause = self._ensure_ready()
                cause = self._hold_while_gated() or cause
                if cause:
                    reasons.append(cause[1])
                state = self._require_fresh()
                self._check_reset_path(state.q, q)
                if self._move_to(q):
                    break
            else:
                raise NeedsPerson('the reset move was interrupted again and again: '
                                  + '; '.join(reasons))
            self.interrupted = self.interruption = None
            self._servo_target = None
            state = self._require_fresh()
            self.filter.reset()
            return state

    def step(self, qd: np.ndarray) -> ArmState:
        """Hold joint velocities ``qd`` (rad/s, already filtered) for one control period."""
        with self._guard():
            self.interrupted = self.interruption = None
            cause = self._ensure_ready() or self._hold_while_gated()
            state, cause = self._fresh_or(cause)
            if cause is not None:
                # No command this step: return a state read after the recovery or the hold.
                return self._interrupt_step(cause)
            ok = self._command(np.asarray(qd, dtype=np.float64), state)
            self._wait_step()
            cause = self._ensure_ready()
            if cause is None and not ok:
                cause = 'command refused', 'command refused by the controller'
            state, cause = self._fresh_or(cause)
            if cause is not None:
                return self._interrupt_step(cause)
            return state

    def read(self) -> ArmState:
        """Return the newest controller sample (and record its age)."""
        return self._to_state(self._request_sample())

    def _request_sample(self) -> tuple:
        link = self.link
        self._sample = None
        if link is None:
            raise LinkLost('the ur5 backend has no client process (closed or reconnecting)')
        return link.request('state')

    def _to_state(self, sample: tuple) -> ArmState:
        r_ok, _, stamp, q, qd, pose, _, runtime, _ = sample
        q = np.asarray(q, dtype=np.float64)
        pose = np.asarray(pose, dtype=np.float64)
        if not r_ok or q.shape != (6,) or pose.shape != (6,):
            raise RuntimeError('the receive interface returned no state (link down?)')
        self._runtime = int(runtime)
        self.clock.observe(float(stamp), time.monotonic())
        return ArmState(q=q, qd=np.asarray(qd, dtype=np.float64), ee_pos=pose[:3],
                        ee_quat=rotvec_to_quat(pose[3:]), stamp=float(stamp))

    def summary(self) -> dict[str, Any]:
        """
        Return what a run's summary reports about the real arm.

        ``interruptions``: truncated steps by kind; ``stop_failures``: stops that could not be
        confirmed; ``reconnects``: fresh client processes after a lost link; ``client_losses``:
        client processes that died, hung or broke the pipe (a native crash among them).
        """
        kinds = [kind for _, kind, _ in self.events]
        return {'interruptions': dict(self.interruptions), 'stop_failures': self.stop_failures,
                'reconnects': kinds.count('reconnected'),
                'client_losses': kinds.count('client_lost')}

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
            self._drop_link()

    def __enter__(self) -> 'UR5RTDE':
        """Use as a context manager: :meth:`close` on exit."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the connection (after ``speedStop`` and ``stopScript``)."""
        self.close()

    # ------------------------------------------------------------------ steps
    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """Serialize calls; on any exception (SIGINT included) speedStop, then stopScript."""
        with self._lock:
            if self._closing.is_set():
                raise RuntimeError('the ur5 backend is closed')
            if self.halted:
                raise NeedsPerson('the arm was halted; a person must restart the worker')
            # No link (a reconnection was interrupted): the supervisor reconnects first.
            try:
                yield
            except BaseException as exc:
                if not self._halt() and not isinstance(exc, NeedsPerson):
                    self.halted = True
                    raise NeedsPerson(
                        f'{type(exc).__name__} ({exc}) while the arm was driven, and its stop '
                        f'could not be confirmed ({self.events[-1][2]}): the watchdog of the '
                        'controller stops it; a person must check the arm') from exc
                raise

    def _fresh_or(self, cause: Cause | None) -> tuple[ArmState | None, Cause | None]:
        """
        Read the state; a stale sample or a lost client becomes the cause (if none yet).

        The sample the supervisor's verdict was drawn from just before is used when there is
        one (one request fewer per check).
        """
        sample, self._sample = self._sample, None
        try:
            state = self._to_state(sample) if sample is not None else self.read()
        except RuntimeError as exc:
            if isinstance(exc, (NeedsPerson, BackendInterrupted)):
                raise
            return None, cause or ('lost link', f'lost the RTDE connection ({exc})')
        if cause is None and self.clock.age(time.monotonic()) > self.dt:
            self._stop_motion()  # the next command would act on an old observation
            self.events.append((time.monotonic(), 'stale', _STALE[1]))
            cause = _STALE
        return state, cause

    def _interrupt_step(self, cause: Cause) -> ArmState:
        kind, why = cause
        self.interrupted, self.interruption = why, kind
        self.interruptions[kind] += 1
        self._servo_target = None
        return self._require_fresh()

    def _command(self, qd: np.ndarray, state: ArmState) -> bool:
        v = qd * self.scale
        try:
            if self.rt.control_mode == 'servoj':
                # Integrate the position targets (the trajectory the safety filter approved),
                # anchored at the measured joints after every reset or interruption.
                anchor = state.q if self._servo_target is None else self._servo_target
                self._servo_target = anchor + v * self.dt
                return bool(self.link.call('control', 'servoJ', _floats(self._servo_target),
                                           0.0, 0.0, self.dt, self.rt.servoj_lookahead,
                                           self.rt.servoj_gain))
            return bool(self.link.call('control', 'speedJ', _floats(v), self.rt.acceleration,
                                       self.dt))
        except RuntimeError as exc:
            _LOG.warning('command failed: %s', exc)
            return False

    def _wait_step(self) -> None:
        """
        Wait for the end of the RL step, in controller periods (initPeriod/waitPeriod).

        Steps keep a fixed cadence of ``task.dt``: the time the supervisor and the env spend
        comes out of the wait (the cadence restarts after a longer interruption).
        """
        now = time.monotonic()
        if self._step_end is None or now - self._step_end > self.dt:
            self._step_end = now  # first step, or after a pause: restart the cadence
        self._step_end += self.dt
        try:
            self.link.request('wait', self._step_end,
                              timeout=self._step_end - now + self.rt.client_timeout_s)
        except RuntimeError as exc:
            _LOG.warning('wait failed: %s', exc)  # the supervisor looks at the link next

    # ------------------------------------------------------------------ stopping
    def _verdict(self, control_required: bool = True) -> tuple[Verdict, str]:
        try:
            sample = self._request_sample()
        except RuntimeError as exc:
            verdict, why = classify(False, 0, 0)
            return verdict, f'{why} ({exc})'
        r_ok, c_ok, _, _, _, _, bits, runtime, mode = sample
        self._sample = sample    # the step reads the state from it
        self._runtime = int(runtime)
        return classify(bool(r_ok and (c_ok or not control_required)), int(bits), int(runtime),
                        int(mode))

    def _stop_motion(self) -> bool:
        """
        ``speedStop`` (``servoStop``); True once the controller confirmed it.

        A stop refused while the control script runs is retried, then the program is stopped
        through the dashboard and :class:`NeedsPerson` raised. The stop counts as confirmed
        when the script no longer runs (the controller stops the arm itself). False, reported,
        when the client cannot reach the controller: its watchdog stops the arm.
        """
        self._servo_target = None
        link = self.link
        if link is None or not link.alive():   # counted as the lost link it is
            _LOG.warning('no stop sent: no link to the controller (its watchdog stops the arm)')
            return False
        method = 'servoStop' if self.rt.control_mode == 'servoj' else 'speedStop'
        why = ''
        for _ in range(_STOP_ATTEMPTS):
            try:
                if link.call('control', method, self.rt.acceleration):
                    return True
                why = f'{method} returned false'
            except LinkLost as exc:
                return self._stop_failed(f'{method}: {exc} (the watchdog stops the arm)')
            except RuntimeError as exc:
                why = f'{method} failed: {exc}'
            verdict, _ = self._verdict()
            if verdict is Verdict.DISCONNECTED:
                return self._stop_failed(f'{why}, then the link was lost')
            if self._runtime != RUNTIME_PLAYING:
                return True   # no program: the controller holds the arm
        self._stop_failed(why)
        with contextlib.suppress(RuntimeError):
            link.call('dashboard', 'stop')
        self.halted = True
        raise NeedsPerson(f'the controller refused to stop the arm ({why}, {_STOP_ATTEMPTS} '
                          'times); its program was stopped through the dashboard. A person '
                          'must check the arm before restarting the worker.')

    def _stop_failed(self, why: str) -> bool:
        self.stop_failures += 1
        self.events.append((time.monotonic(), 'stop_failed', why))
        _LOG.error('the stop of the arm is not confirmed: %s', why)
        return False

    def _halt(self) -> bool:
        """``speedStop`` then ``stopScript``; True once confirmed. Never raises: reports."""
        link = self.link
        if link is None or not self._control_up:
            return True   # closed already, or no control script was started through it
        try:
            verdict, why = self._verdict()
            if verdict is Verdict.DISCONNECTED:
                return self._stop_failed(f'halt: {why}; the watchdog of the controller stops '
                                         'the arm')
            if self._runtime != RUNTIME_PLAYING:
                return True
            stopped = self._stop_motion()
            for _ in range(_STOP_ATTEMPTS):
                link.call('control', 'stopScript')
                deadline = time.monotonic() + _STOP_CONFIRM
                while time.monotonic() < deadline:
                    if not link.call('control', 'isProgramRunning'):
                        return stopped
                    time.sleep(0.01)
            link.call('dashboard', 'stop')
            if link.call('control', 'isProgramRunning'):
                return self._stop_failed('stopScript and the dashboard stop left the control '
                                         'script running')
            return stopped
        except RuntimeError as exc:   # NeedsPerson and LinkLost included: reported
            return self._stop_failed(f'halt: {exc}')

    # ------------------------------------------------------------------ resets
    def _move_to(self, q: np.ndarray) -> bool:
        """Asynchronous moveJ to ``q``; kick the watchdog until at rest there. False if cut."""
        link = self.link
        speed = self.rt.reset_speed * self.scale
        try:
            state = self.read()
            distance = float(np.max(np.abs(q - state.q)))
            if distance < _REST_ERROR:
                return True
            if not link.call('control', 'moveJ', _floats(q), speed, self.rt.reset_acceleration,
                             True):
                return False
            limit = 3.0 * (distance / speed + speed / self.rt.reset_acceleration) + 2.0
            deadline = time.monotonic() + limit
            while time.monotonic() < deadline:
                self._sleep(5.0 * (1.0 / self.frequency) + 0.01)
                link.call('control', 'kickWatchdog')
                verdict, why = self._verdict()
                if verdict is not Verdict.RUN:
                    self.events.append((time.monotonic(), 'reset_interrupted', why))
                    return False
                state = self.read()
                if float(np.max(np.abs(q - state.q))) < _REST_ERROR and \
                        float(np.max(np.abs(state.qd))) < _REST_SPEED:
                    return True
        except LinkLost as exc:   # the supervisor reconnects before the next attempt
            self.events.append((time.monotonic(), 'reset_interrupted', str(exc)))
            return False
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
