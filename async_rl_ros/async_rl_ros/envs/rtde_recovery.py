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
Recovery half of the ur5 backend: connecting, reconnecting and clearing controller faults.

:class:`Recovery` is a mixin of :class:`async_rl_ros.envs.ur5_rtde.UR5RTDE` (it uses that
class's attributes: ``link``, ``rt``, ``clock``, ``stops``, ``events``, ``gate``...). Every
connection runs in a fresh ur_rtde client process (:class:`ClientProcess`): a reconnection
kills the old one, whatever state its native code is in, and starts another with the
supervisor's backoff. The rules themselves live in :mod:`async_rl_ros.envs.rtde_supervisor`.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from typing import Any

from async_rl_ros.core.config import ConfigError
from async_rl_ros.envs.arm import ArmState
from async_rl_ros.envs.rtde_link import ClientProcess, LinkLost
from async_rl_ros.envs.rtde_supervisor import backoff, NeedsPerson, Verdict

__all__ = ['Recovery', 'BackendInterrupted', 'controller_major']

_LOG = logging.getLogger('async_rl_ros.envs.ur5_rtde')
_PROGRAM_TIMEOUT = 5.0   # s: wait for the re-uploaded control script to run
_UNLOCK_TIMEOUT = 10.0   # s: retries of a refused unlock after the cool-down
_FRESH_TIMEOUT = 1.0     # s: wait for a fresh sample before declaring the link lost
_CONNECT_TIMEOUT = 15.0  # s: constructors of the ur_rtde clients (script upload included)
_RECOVERIES = 8          # recoveries in a row before the supervisor asks for a person

Cause = tuple[str, str]  # (interruption kind, reason in words)


class BackendInterrupted(RuntimeError):
    """The backend was closed or :meth:`interrupt` ed while it waited."""


def controller_major(version_text: str) -> int:
    """Return the major version from a dashboard ``PolyscopeVersion`` answer (3 or 5)."""
    match = re.search(r'(\d+)\.(\d+)\.(\d+)', version_text)
    if match is None:
        raise RuntimeError(f'cannot read the controller version from {version_text!r}')
    return int(match.group(1))


class Recovery:
    """Connection and fault recovery of :class:`~async_rl_ros.envs.ur5_rtde.UR5RTDE`."""

    link: ClientProcess | None
    events: list[tuple[float, str, str]]

    def events_of(self: Any, kind: str) -> list[str]:
        """Return the details of the recorded events of ``kind``."""
        return [detail for _, k, detail in self.events if k == kind]

    # ------------------------------------------------------------------ connection
    def _open_link(self: Any) -> None:
        """Start a client process, connect it, set up the control script; raise on failure."""
        self._drop_link()
        self.clock.reset()
        self._control_up = False   # no control script of this link yet: nothing to halt
        self._watchdog_on = False
        link = self.link = ClientProcess(self.ip, self.frequency, self.rt.client_timeout_s,
                                         self.priority)
        if link.priority_refused and not self.events_of('priority_refused'):
            self.events.append((time.monotonic(), 'priority_refused', link.priority_refused))
            _LOG.warning('the ur_rtde client process runs at normal priority: %s; allow it with '
                         '`ulimit -r 50` (rtprio in /etc/security/limits.conf) or CAP_SYS_NICE, '
                         'or set rtde.rt_priority to 0', link.priority_refused)
        version = link.request('dashboard', timeout=_CONNECT_TIMEOUT)
        major = controller_major(version)
        self.series = 'e-Series' if major >= 5 else 'CB3'
        if major < 5 and self.frequency > 125.0:
            raise ConfigError('rtde.frequency', self.frequency,
                              f'125 on a CB3 controller (it reports version {version})')
        if major >= 5 and not link.call('dashboard', 'isInRemoteControl'):
            raise NeedsPerson('the e-Series controller is in local control: switch the teach '
                              'pendant to Remote Control (top right corner) and restart')
        link.request('receive', timeout=_CONNECT_TIMEOUT)
        if self._wait_fresh(_FRESH_TIMEOUT) is None:
            raise RuntimeError(f'no RTDE data from {self.ip} within {_FRESH_TIMEOUT:g} s')
        verdict, why = self._verdict(control_required=False)
        if verdict in (Verdict.HALT, Verdict.NOT_POWERED):
            raise NeedsPerson(f'{why}: a person must clear it on the teach pendant first; '
                              'nothing was moved')
        if verdict is Verdict.PROTECTIVE_STOP:
            self._unlock_protective_stop()
        self._control_up = True
        link.request('control', timeout=_CONNECT_TIMEOUT)
        if self.digital_io:
            link.request('io', timeout=_CONNECT_TIMEOUT)
        self._arm_program()

    def _arm_program(self: Any) -> None:
        """Set up a freshly started control script: flange TCP; the watchdog once driving."""
        self.link.call('control', 'setTcp', [0.0] * 6)
        self._watchdog_on = False
        if self._driving:
            self._arm_watchdog()

    def _arm_watchdog(self: Any) -> None:
        """
        Arm the controller's watchdog (from the first reset or step on, not at connection).

        Armed at connection, it would end the program whenever the first command comes later
        than one watchdog period (a node configured, activated later).
        """
        if not self._watchdog_on:
            if not self.link.call('control', 'setWatchdog', float(self.rt.watchdog_min_hz)):
                raise RuntimeError('setWatchdog failed: the control script is not running')
            self._watchdog_on = True

    def _drop_link(self: Any) -> None:
        """Disconnect and end the client process (killed if it does not answer at once)."""
        link, self.link = self.link, None
        if link is not None:
            link.close(timeout=1.0)

    def _reconnect(self: Any) -> None:
        """Start a fresh client process with exponential backoff until it sees fresh data."""
        rt = self.rt
        attempt, last = 0, ''
        if self.link is not None and self.link.lost:
            self.events.append((time.monotonic(), 'client_lost', self.link.lost))
        self._drop_link()
        for delay in backoff(rt.reconnect_initial_s, rt.reconnect_max_s, rt.reconnect_attempts):
            attempt += 1
            self._sleep(delay)
            try:
                self._open_link()
            except NeedsPerson:
                self.halted = True
                raise
            except BackendInterrupted:
                raise
            except RuntimeError as exc:   # LinkLost, refused connection, no data, no script
                last = str(exc)
                _LOG.warning('reconnect attempt %d failed: %s', attempt, exc)
                self._drop_link()
                continue
            self.events.append((time.monotonic(), 'reconnected', f'after {attempt} attempts'))
            return
        self.halted = True
        if 'script' in last:
            raise NeedsPerson(f'the control script does not start on {self.ip}: {attempt} fresh '
                              f'connections failed (last: {last}). A person must check the '
                              'controller: remote control, the program state and the safety '
                              'status on the teach pendant')
        raise NeedsPerson(f'lost the connection to {self.ip} and {attempt} reconnection '
                          f'attempts failed (last: {last}): check the network and the '
                          'controller')

    # ------------------------------------------------------------------ supervision
    def _ensure_ready(self: Any) -> Cause | None:
        """Recover until the controller runs; return what was recovered (None: nothing)."""
        first = None
        for _ in range(_RECOVERIES):
            verdict, why = self._verdict()
            if verdict is Verdict.RUN:
                return first
            first = first or (verdict.kind, why)
            self.events.append((time.monotonic(), verdict.value, why))
            _LOG.warning('supervisor: %s', why)
            if verdict is Verdict.HALT:
                self.halted = True
                raise NeedsPerson(f'{why}: the arm is halted and will not recover by itself. '
                                  'A person must inspect the cell, release the stop on the '
                                  'teach pendant and restart the worker.')
            if verdict is Verdict.NOT_POWERED:
                self.halted = True
                raise NeedsPerson(f'{why}. The worker will not power the arm itself: a person '
                                  'must check the cell, power the arm on and release the '
                                  'brakes on the teach pendant, and restart the worker.')
            try:
                if verdict is Verdict.PROTECTIVE_STOP:
                    self._recover_protective_stop()
                elif verdict is Verdict.PROGRAM_STOPPED:
                    self._restart_program()
                else:
                    self._reconnect()
            except LinkLost:
                continue   # the client process died during the recovery: reconnect next
            except (NeedsPerson, BackendInterrupted):
                raise
            except RuntimeError as exc:   # the client raised, the script does not start
                self.events.append((time.monotonic(), 'recovery_failed', f'{why}: {exc}'))
                _LOG.warning('supervisor: recovering from "%s" failed (%s); reconnecting', why,
                             exc)
                self._reconnect()   # a fresh client uploads its script anew, with back-off
        raise NeedsPerson(f'the controller does not recover ({first[1]}); a person must check '
                          'it')

    def _recover_protective_stop(self: Any) -> None:
        self._stop_motion()
        try:
            self.stops.record(time.monotonic())
        except NeedsPerson:
            self.halted = True
            raise
        self._unlock_protective_stop()
        self._restart_program()

    def _unlock_protective_stop(self: Any) -> None:
        self._sleep(self.stops.cooldown_left(time.monotonic()))
        deadline = time.monotonic() + _UNLOCK_TIMEOUT
        while True:
            try:
                self.link.call('dashboard', 'unlockProtectiveStop')
                break
            except LinkLost:
                raise
            except RuntimeError as exc:
                if 'until' not in str(exc) or time.monotonic() > deadline:
                    raise NeedsPerson(f'the protective stop cannot be unlocked ({exc}); a '
                                      'person must check the robot') from None
                self._sleep(0.2)  # the controller's cool-down is longer than configured
        self.link.call('dashboard', 'closeSafetyPopup')
        self.events.append((time.monotonic(), 'unlocked', 'protective stop unlocked'))
        deadline = time.monotonic() + _PROGRAM_TIMEOUT
        while self.link.call('receive', 'isProtectiveStopped'):
            if time.monotonic() > deadline:
                raise NeedsPerson('the protective stop stays on after the unlock')
            self._sleep(0.01)

    def _restart_program(self: Any) -> None:
        link = self.link
        if not link.call('control', 'isProgramRunning'):
            link.call('control', 'reuploadScript',
                      timeout=_PROGRAM_TIMEOUT + self.rt.client_timeout_s)
        deadline = time.monotonic() + _PROGRAM_TIMEOUT
        while not link.call('control', 'isProgramRunning'):
            if time.monotonic() > deadline:
                raise RuntimeError(f'the re-uploaded control script did not start within '
                                   f'{_PROGRAM_TIMEOUT:g} s')
            self._sleep(0.01)
        self._arm_program()
        self.events.append((time.monotonic(), 'program_restarted', 'control script running'))

    def _wait_fresh(self: Any, timeout: float) -> ArmState | None:
        """Poll until a sample younger than one control period arrives; None on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            if self.link is None or not self.link.alive():
                return None
            try:
                state = self.read()
                if self.clock.age(time.monotonic()) <= self.dt:
                    return state
            except LinkLost:
                return None
            except RuntimeError:
                pass
            if time.monotonic() > deadline:
                return None
            self._sleep(0.5 / self.frequency)

    def _require_fresh(self: Any) -> ArmState:
        """Return a fresh sample, reconnecting when none comes."""
        for _ in range(3):
            state = self._wait_fresh(_FRESH_TIMEOUT)
            if state is not None:
                return state
            self.events.append((time.monotonic(), 'stale', 'no fresh controller data'))
            self._stop_motion()
            self._reconnect()
        raise NeedsPerson(f'no fresh data from {self.ip} even after reconnecting')

    def _hold_while_gated(self: Any) -> Cause | None:
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
                raise BackendInterrupted('the ur5 backend was closed or interrupted while '
                                         'holding')
            if self.link is not None:
                with contextlib.suppress(LinkLost):  # a lost link is recovered just below
                    self.link.call('control', 'kickWatchdog')
            self._ensure_ready()
        return 'policy gate', 'policy gate: ' + first

    def _interruptible_sleep(self: Any, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0.0:
            if self._closing.wait(min(left, 0.05)) or self._interrupted.is_set():
                raise BackendInterrupted('the ur5 backend was closed or interrupted')
