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
recovery in :mod:`async_rl_ros.envs.rtde_recovery`, the inside of a step in
:mod:`async_rl_ros.envs.rtde_step`):

* the ur_rtde watchdog is armed from the first reset or step on, so the controller stops the
  arm when the worker stalls;
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
from async_rl_ros.core.workers import realtime
from async_rl_ros.core.workers.step_budget import StepBudget
from async_rl_ros.envs.arm import ArmState, rotvec_to_quat
from async_rl_ros.envs.rtde_link import ClientProcess, LinkLost
from async_rl_ros.envs.rtde_moves import Moves
from async_rl_ros.envs.rtde_recovery import BackendInterrupted, controller_major, Recovery
from async_rl_ros.envs.rtde_step import Stepping
from async_rl_ros.envs.rtde_stop import Stopping
from async_rl_ros.envs.rtde_supervisor import (NeedsPerson, PolicyGate, ProtectiveStopLog,
                                               StateClock)
from async_rl_ros.envs.safety import SafetyFilter
import numpy as np

__all__ = ['UR5RTDE', 'NeedsPerson', 'import_ur_rtde', 'controller_major']

_LOG = logging.getLogger(__name__)


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


class UR5RTDE(Stepping, Stopping, Moves, Recovery):
    """
    A physical UR5 behind a UR controller (CB3 or e-Series), supervised.

    :param cfg: worker configuration (``rtde.*``, ``task.control_hz``, ``safety.*``).
    :param gate: policy gate the transport feeds; ``None`` lets every command through (tests,
        evaluation of a fixed policy).
    :param sleep: interruptible wait (s); injectable for tests.
    :param tool_length: how far the tool tip reaches below the flange (m); reset moves keep
        it in the workspace box too (a gripper's fingertips).
    :param digital_io: also connect ur_rtde's IO interface, for :meth:`set_digital_out` (a
        gripper on a digital output).
    """

    def __init__(self, cfg: EnvWorkerConfig, gate: PolicyGate | None = None,
                 sleep: Callable[[float], None] | None = None, tool_length: float = 0.0,
                 digital_io: bool = False):
        self.cfg = cfg
        self.rt = cfg.rtde
        self.ip = cfg.rtde.robot_ip
        self.dt = cfg.task.dt
        self.frequency = float(cfg.rtde.frequency)
        self.substeps = cfg.controller_periods
        self.scale = float(cfg.rtde.speed_scaling)
        self.gate = gate
        self.tool_length = float(tool_length)
        self.digital_io = bool(digital_io)
        self.filter = SafetyFilter(cfg.safety, self.dt, self.tool_length)
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
        self._driving = False                 # a reset or step came: the watchdog is armed
        self._watchdog_on = False             # the watchdog of this link's script is armed
        self._last_q = np.zeros(6)            # rad: joints of the newest sample
        self.link: ClientProcess | None = None
        #: timing of every step (observation in, policy, filter, command out)
        self.budget = StepBudget(self.dt)
        #: SCHED_FIFO priority of the client process (0: none); the control loop's is lower
        self.priority = int(cfg.rtde.rt_priority)
        self.control_thread = realtime.ControlThread(realtime.control_priority(self.priority))
        self.series = 'e-Series'
        _check_ur_rtde()
        try:
            try:
                self._open_link()
            except (NeedsPerson, BackendInterrupted):
                raise
            except RuntimeError as exc:  # no link at all: refused, unanswered, no data
                # A person must fix the address, the network or the controller: a worker
                # started again would only fail again.
                raise NeedsPerson(f'cannot connect to the UR controller at {self.ip} ({exc}): '
                                  'check rtde.robot_ip, the network and that the controller is '
                                  'on (async-rl-preflight checks the link); nothing was moved'
                                  ) from None
        except BaseException:
            self._halt()
            self._drop_link()
            raise
        _LOG.info('connected to the %s controller at %s (%g Hz, %s; client pid %d)',
                  self.series, self.ip, self.frequency, self.rt.control_mode, self.link.pid)

    # ------------------------------------------------------------------ ArmBackend
    def reset(self, q: np.ndarray) -> ArmState:
        """Move (``moveJ``) to the start pose ``q`` (rad) and return the state at rest there."""
        with self._guard():
            self._start_driving()
            self.budget.abandon()
            q = np.asarray(q, dtype=np.float64)
            reasons = []
            for _ in range(self.rt.protective_stop_limit + 2):
                cause = self._ensure_ready()
                cause = self._hold_while_gated() or cause
                if cause:
                    reasons.append(cause[1])
                state = self._require_fresh()
                self._check_reset_path(state.q, q)
                why = self._move_to(q)
                if not why:
                    break
                reasons.append(why)
            else:
                raise NeedsPerson('the reset move was interrupted again and again: '
                                  + '; '.join(reasons))
            self.interrupted = self.interruption = None
            self._servo_target = None
            state = self._require_fresh()
            self.filter.reset()
            self.budget.observed(time.monotonic(), time.monotonic())
            return state

    def step(self, qd: np.ndarray) -> ArmState:
        """Hold joint velocities ``qd`` (rad/s, already filtered) for one control period."""
        with self._guard():
            self.interrupted = self.interruption = None
            self._start_driving()
            cause = self._hold_while_gated()
            ok = False
            if cause is None:
                ok, cause = self._command(np.asarray(qd, dtype=np.float64))
            if cause is not None:
                # No command this step: return a state read after the recovery or the hold.
                return self._interrupt_step(cause)
            state, cause = self._checked(self._wait_step())
            if cause is None and not ok:
                cause = 'command refused', 'command refused by the controller'
            if cause is not None:
                return self._interrupt_step(cause)
            self.budget.observed(self._step_end, time.monotonic())
            return state

    def read(self) -> ArmState:
        """Return the newest controller sample (and record its age)."""
        return self._to_state(self._request_sample())

    def set_digital_out(self, index: int, level: bool) -> bool:
        """
        Set standard digital output ``index`` (a gripper's); ``False`` when it was not set.

        It is not set while the link is down (the supervisor reconnects it in the next step):
        the caller sends it again.
        """
        link = self.link
        if link is None:
            return False
        try:
            return bool(link.call('io', 'setStandardDigitalOut', int(index), bool(level)))
        except RuntimeError as exc:   # LinkLost, or the client raised
            _LOG.warning('digital output %d not set: %s', index, exc)
            return False

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
        self._last_q = q
        self.clock.observe(float(stamp), time.monotonic())
        return ArmState(q=q, qd=np.asarray(qd, dtype=np.float64), ee_pos=pose[:3],
                        ee_quat=rotvec_to_quat(pose[3:]), stamp=float(stamp))

    def summary(self) -> dict[str, Any]:
        """
        Return what a run's summary reports about the real arm.

        ``interruptions``: truncated steps by kind; ``stop_failures``: stops that could not be
        confirmed; ``stops_in_effect``: refused stops that the controller's state showed to
        be in effect already; ``reconnects``: fresh client processes after a lost link;
        ``client_losses``: client processes that died, hung or broke the pipe (a native crash
        among them); ``realtime``: the priorities taken (0: none) and why one was refused;
        and the step budget (:meth:`StepBudget.summary`): ``step_ms``, ``phase_ms``,
        ``deadline_ms``, ``deadline_misses``, ``first_action_ms``.
        """
        kinds = [kind for _, kind, _ in self.events]
        link = self.link
        refused = link.priority_refused if link is not None else None
        return {'interruptions': dict(self.interruptions), 'stop_failures': self.stop_failures,
                'stops_in_effect': kinds.count('stop_in_effect'),
                'reconnects': kinds.count('reconnected'),
                'client_losses': kinds.count('client_lost'),
                'realtime': {'client_priority': 0 if refused else self.priority,
                             'control_priority': self.control_thread.got.get('priority', 0),
                             'refused': refused},
                **self.budget.summary()}

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
            self.substeps = cfg.controller_periods  # rtde.frequency is read-only
            self.filter = SafetyFilter(cfg.safety, self.dt, self.tool_length)

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
            self.control_thread.restore()

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

    def _start_driving(self) -> None:
        """Take the control loop's priority and arm the watchdog (a stopped script: later)."""
        self.control_thread.enter()
        self._driving = True
        if self.link is not None and not self._watchdog_on:
            with contextlib.suppress(RuntimeError):   # the supervisor restarts the script
                self._arm_watchdog()
