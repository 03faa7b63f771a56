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
Decisions of the real-robot safety supervisor, free of sockets and clocks of its own.

The RTDE backend (:mod:`async_rl_ros.envs.ur5_rtde`) asks these objects what to do; they only
look at numbers (status bits, timestamps, times), so every rule is unit-tested without a robot:

* :func:`classify` -- what the controller's status means: run, recover a protective stop,
  restart the program, reconnect, or halt for a person (emergency stop, safety fault, an arm
  that is not powered on and released);
* :class:`ProtectiveStopLog` -- at most ``protective_stop_limit`` protective stops within
  ``protective_stop_window_s``, and the cool-down before an unlock;
* :func:`backoff` -- reconnection delays, doubled after each failure;
* :class:`StateClock` -- how old the newest controller sample is, from its timestamps;
* :class:`PolicyGate` -- whether the learner's policy may drive the arm (version lag, CRC,
  heartbeat); thread-safe, fed by the transport.
"""

from __future__ import annotations

import collections
import enum
import threading
import time
from typing import Callable, Iterator

from async_rl_ros.core.config import RTDEConfig
from async_rl_ros.core.errors import NeedsPerson

__all__ = ['Verdict', 'NeedsPerson', 'classify', 'ProtectiveStopLog', 'backoff', 'StateClock',
           'PolicyGate', 'SAFETY_BITS', 'HALT_MASK', 'RUNTIME_PLAYING', 'ROBOT_MODES',
           'ROBOT_MODE_RUNNING', 'INTERRUPTION_KINDS']

#: ``safety_status_bits`` of a UR controller (RTDE output), bit index by meaning.
SAFETY_BITS = {'normal': 0, 'reduced': 1, 'protective_stopped': 2, 'recovery': 3,
               'safeguard_stopped': 4, 'system_emergency_stopped': 5,
               'robot_emergency_stopped': 6, 'emergency_stopped': 7, 'violation': 8,
               'fault': 9, 'stopped_due_to_safety': 10}
#: ``runtime_state`` of a running program.
RUNTIME_PLAYING = 2
#: ``robot_mode`` of a UR controller (RTDE output) by value.
ROBOT_MODES = {-1: 'NO_CONTROLLER', 0: 'DISCONNECTED', 1: 'CONFIRM_SAFETY', 2: 'BOOTING',
               3: 'POWER_OFF', 4: 'POWER_ON', 5: 'IDLE', 6: 'BACKDRIVE', 7: 'RUNNING',
               8: 'UPDATING_FIRMWARE'}
#: ``robot_mode`` of an arm that is powered on with its brakes released.
ROBOT_MODE_RUNNING = 7
#: Why a step was interrupted (the keys of ``UR5RTDE.interruptions``).
INTERRUPTION_KINDS = ('stale data', 'protective stop', 'program stopped', 'lost link',
                      'policy gate', 'command refused')
_HALT_BITS = ('system_emergency_stopped', 'robot_emergency_stopped', 'emergency_stopped',
              'violation', 'fault', 'safeguard_stopped')
#: Safety status bits under which no motion command is sent: the halts above and a protective
#: stop (which :func:`classify` lets the backend recover from).
HALT_MASK = sum(1 << SAFETY_BITS[name] for name in (*_HALT_BITS, 'protective_stopped'))


class Verdict(enum.Enum):
    """What the backend must do before (or instead of) the next command."""

    RUN = 'run'                          #: all good
    PROTECTIVE_STOP = 'protective_stop'  #: cool-down, unlock, re-upload, continue
    PROGRAM_STOPPED = 'program_stopped'  #: the control script ended (watchdog): re-upload
    DISCONNECTED = 'disconnected'        #: reconnect with backoff, then re-read the state
    HALT = 'halt'                        #: emergency stop or safety fault: never auto-recover
    NOT_POWERED = 'not_powered'          #: robot mode not RUNNING (off, idle, booting): a person

    @property
    def kind(self) -> str:
        """Return how an interruption by this verdict is counted: an INTERRUPTION_KINDS entry."""
        return {'protective_stop': 'protective stop', 'program_stopped': 'program stopped',
                'disconnected': 'lost link'}.get(self.value, self.value)


def _bit(bits: int, name: str) -> bool:
    return bool(bits >> SAFETY_BITS[name] & 1)


def classify(connected: bool, safety_bits: int, runtime_state: int,
             robot_mode: int = ROBOT_MODE_RUNNING) -> tuple[Verdict, str]:
    """
    Decide from the controller's status what must happen before the next command.

    :param connected: both RTDE interfaces (receive and control) are connected.
    :param safety_bits: ``safety_status_bits``.
    :param runtime_state: ``runtime_state`` (2 = program playing).
    :param robot_mode: ``robot_mode`` (7 = RUNNING: powered on, brakes released).
    :returns: the verdict and a reason in words.
    """
    if not connected:
        return Verdict.DISCONNECTED, 'lost the RTDE connection to the controller'
    halted = [name for name in _HALT_BITS if _bit(safety_bits, name)]
    if halted:
        return Verdict.HALT, 'controller safety status: ' + ', '.join(halted)
    if robot_mode != ROBOT_MODE_RUNNING:
        name = ROBOT_MODES.get(robot_mode, str(robot_mode))
        return Verdict.NOT_POWERED, (f'robot mode {name}, not RUNNING: the arm is not powered '
                                     'on with its brakes released')
    if _bit(safety_bits, 'protective_stopped'):
        return Verdict.PROTECTIVE_STOP, 'protective stop'
    if runtime_state != RUNTIME_PLAYING:
        return Verdict.PROGRAM_STOPPED, (f'control script not running (runtime_state '
                                         f'{runtime_state}; watchdog or external stop)')
    return Verdict.RUN, ''


class ProtectiveStopLog:
    """
    Count protective stops in a sliding window and time the cool-down before an unlock.

    :param limit: stops tolerated within the window; the next one raises :class:`NeedsPerson`.
    :param window_s: length of the window (s).
    :param cooldown_s: wait after a stop before unlocking it (s).
    """

    def __init__(self, limit: int, window_s: float, cooldown_s: float):
        self.limit = int(limit)
        self.window_s = float(window_s)
        self.cooldown_s = float(cooldown_s)
        self.times: collections.deque[float] = collections.deque()

    def record(self, now: float) -> None:
        """Register a stop at ``now`` (s); raise :class:`NeedsPerson` beyond the limit."""
        self.times.append(now)
        while self.times and now - self.times[0] > self.window_s:
            self.times.popleft()
        if len(self.times) > self.limit:
            raise NeedsPerson(
                f'{len(self.times)} protective stops within {self.window_s:g} s (limit '
                f'{self.limit}): the arm is stopped. A person must inspect the cell and the '
                'cause of the stops (collisions, payload, limits) before restarting the worker.')

    def cooldown_left(self, now: float) -> float:
        """Return how long (s) to wait before the last stop may be unlocked."""
        if not self.times:
            return 0.0
        return max(0.0, self.times[-1] + self.cooldown_s - now)


def backoff(initial_s: float, max_s: float, attempts: int) -> Iterator[float]:
    """Yield ``attempts`` waits (s): ``initial_s``, doubled each time, capped at ``max_s``."""
    delay = float(initial_s)
    for _ in range(int(attempts)):
        yield min(delay, max_s)
        delay *= 2.0


class StateClock:
    """
    Age of the newest controller sample, from the controller's own timestamps.

    The offset between the local clock and the controller clock is the smallest
    ``local - stamp`` seen (transport delays are never negative), so the age of a sample is
    ``local_now - offset - stamp``: it grows when the samples stop, even if nobody polls.
    A single sample proves nothing (it may be the last one of a dead link): the age stays
    infinite until the timestamp has changed once since the start or the last :meth:`reset`.
    """

    def __init__(self):
        self.offset: float | None = None
        self.stamp: float | None = None
        self._first: float | None = None   # the stamp seen first since the reset

    def reset(self) -> None:
        """Forget everything (after a reconnection the controller may have restarted)."""
        self.offset = None
        self.stamp = None
        self._first = None

    def observe(self, stamp: float, now: float) -> float:
        """Record the newest ``stamp`` (controller s) read at local time ``now`` (s); age."""
        if self.offset is None and (self._first is None or stamp == self._first):
            self._first = stamp   # no evidence yet that samples are flowing
            return float('inf')
        offset = now - stamp
        if self.offset is None or offset < self.offset or \
                (self.stamp is not None and stamp < self.stamp):
            self.offset = offset  # first sample, a faster path, or a controller restart
        self.stamp = stamp
        return self.age(now)

    def age(self, now: float) -> float:
        """Return how old (s) the newest sample is at ``now``; infinite before any sample."""
        if self.offset is None or self.stamp is None:
            return float('inf')
        return max(0.0, now - self.offset - self.stamp)


class PolicyGate:
    """
    Whether the policy may drive the real arm; the transport feeds it from any thread.

    Closed (the arm holds still) while the policy lags the learner by more than
    ``max_policy_lag`` versions, while the last weights failed their CRC, when no learner
    heartbeat arrived for ``heartbeat_timeout_s``, or while an input the policy acts on is
    unusable (:meth:`watch`: the cube pose of a physical cell, the gripper's link). Random
    warm-up actions (no policy yet) are not judged by lag.

    :param max_policy_lag: largest tolerated lag (versions).
    :param heartbeat_timeout_s: longest silence of the learner (s).
    :param clock: monotonic clock (s); injectable for tests.
    """

    def __init__(self, max_policy_lag: int, heartbeat_timeout_s: float,
                 clock: Callable[[], float] = time.monotonic):
        self.max_policy_lag = int(max_policy_lag)
        self.heartbeat_timeout_s = float(heartbeat_timeout_s)
        self.clock = clock
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self.policy_version = -1
        self.learner_version = -1
        self.crc_failed = False
        self.last_heartbeat = clock()
        self._inputs: list[tuple[str, Callable[[], str | None]]] = []

    @classmethod
    def from_config(cls, cfg: RTDEConfig, clock: Callable[[], float] = time.monotonic
                    ) -> 'PolicyGate':
        """Build a gate with the limits of ``rtde.*``."""
        return cls(cfg.max_policy_lag, cfg.heartbeat_timeout_s, clock)

    def watch(self, name: str, check: Callable[[], str | None]) -> None:
        """
        Also hold the arm while ``check()`` gives a reason: an input the policy acts on.

        :param name: what the input is (``'cube pose'``), the first words of the reason.
        :param check: returns why the input is unusable, or ``None``; it may raise
            :class:`NeedsPerson` when the input is lost for good.
        """
        with self._lock:
            self._inputs.append((name, check))

    def heartbeat(self, learner_version: int | None = None) -> None:
        """Record a sign of life of the learner (and its current policy version)."""
        with self._lock:
            self.last_heartbeat = self.clock()
            if learner_version is not None:
                self.learner_version = max(self.learner_version, int(learner_version))
            self._changed.notify_all()

    def policy_loaded(self, version: int) -> None:
        """Record that the worker now acts with weights of ``version`` (CRC passed)."""
        with self._lock:
            self.policy_version = int(version)
            self.learner_version = max(self.learner_version, int(version))
            self.crc_failed = False
            self._changed.notify_all()

    def crc_failure(self) -> None:
        """Record that the newest weights failed their CRC (they were not loaded)."""
        with self._lock:
            self.crc_failed = True
            self._changed.notify_all()

    def reason(self) -> str | None:
        """Return why the arm must hold still, or ``None`` when the policy may act."""
        with self._lock:
            return self._reason()

    def _reason(self) -> str | None:
        silence = self.clock() - self.last_heartbeat
        if silence > self.heartbeat_timeout_s:
            return f'no learner heartbeat for {silence:.1f} s'
        if self.crc_failed:
            return 'the newest policy weights failed their CRC check'
        if self.policy_version >= 0:
            lag = self.learner_version - self.policy_version
            if lag > self.max_policy_lag:
                return f'policy is {lag} versions behind the learner (max {self.max_policy_lag})'
        for name, check in self._inputs:
            why = check()
            if why is not None:
                return f'{name}: {why}'
        return None

    def wait_open(self, timeout: float) -> str | None:
        """Wait up to ``timeout`` s for the gate to open; return the remaining reason."""
        with self._lock:
            reason = self._reason()
            if reason is not None:
                self._changed.wait(timeout)
                reason = self._reason()
            return reason
