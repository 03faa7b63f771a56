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
Stopping half of the ur5 backend: the controller's verdict, confirmed stops, the halt.

:class:`Stopping` is a mixin of :class:`async_rl_ros.envs.ur5_rtde.UR5RTDE` (it uses that
class's ``link``, ``rt``, ``events``, ``frequency``...). A ``speedStop`` that returns false
is not yet a refusal: a stop already in effect -- the control script no longer runs (the
watchdog ended it, the controller restarted), a safety stop holds the arm (protective stop,
safeguard or emergency stop) or the arm is not powered -- makes ur_rtde answer false too.
So before each retry the robot's and the program's state are read, and the retries are
spaced over :data:`STOP_SPACING` controller cycles; only a running program on a powered arm
without a safety stop that keeps refusing is a refusal, which needs a person.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

from async_rl_ros.envs.rtde_link import LinkLost
from async_rl_ros.envs.rtde_supervisor import (classify, HALT_MASK, NeedsPerson,
                                               ROBOT_MODE_RUNNING, ROBOT_MODES, RUNTIME_PLAYING,
                                               SAFETY_BITS, Verdict)

__all__ = ['Stopping', 'STOP_SPACING', 'stop_in_effect']

_LOG = logging.getLogger('async_rl_ros.envs.ur5_rtde')
#: Controller cycles waited after each refused stop before the state is judged again.
STOP_SPACING = (4, 16, 64)
_STOP_CONFIRM = 0.5     # s: wait for the program to end after stopScript
_STOP_ATTEMPTS = 3      # stopScript attempts of a halt


def stop_in_effect(sample: tuple) -> str:
    """Return why the arm is held by the controller already (a sample of the client), or ''."""
    _, _, _, _, _, _, bits, runtime, mode = sample
    if int(mode) != ROBOT_MODE_RUNNING:
        return f'robot mode {ROBOT_MODES.get(int(mode), mode)}'
    on = [name for name, bit in SAFETY_BITS.items() if HALT_MASK >> bit & int(bits) >> bit & 1]
    if on:
        return 'safety stop: ' + ', '.join(on)
    if int(runtime) != RUNTIME_PLAYING:
        return f'the control script is not running (runtime_state {int(runtime)})'
    return ''


class Stopping:
    """Verdicts, stops and the halt of :class:`~async_rl_ros.envs.ur5_rtde.UR5RTDE`."""

    def _classify(self: Any, sample: tuple, control_required: bool = True
                  ) -> tuple[Verdict, str]:
        r_ok, c_ok, _, _, _, _, bits, runtime, mode = sample
        self._runtime = int(runtime)
        return classify(bool(r_ok and (c_ok or not control_required)), int(bits), int(runtime),
                        int(mode))

    def _verdict(self: Any, control_required: bool = True) -> tuple[Verdict, str]:
        try:
            sample = self._request_sample()
        except RuntimeError as exc:
            verdict, why = classify(False, 0, 0)
            return verdict, f'{why} ({exc})'
        self._sample = sample    # the step reads the state from it
        return self._classify(sample, control_required)

    def _stop_motion(self: Any) -> bool:
        """
        ``speedStop`` (``servoStop``); True once the controller confirmed it or holds the arm.

        A refused stop is judged on the controller's state (:func:`stop_in_effect`) and
        retried over :data:`STOP_SPACING` cycles; only then is the program stopped through
        the dashboard and :class:`NeedsPerson` raised. False, reported, when the client
        cannot reach the controller: its watchdog stops the arm.
        """
        self._servo_target = None
        link = self.link
        if link is None or not link.alive():   # counted as the lost link it is
            _LOG.warning('no stop sent: no link to the controller (its watchdog stops the arm)')
            return False
        method = 'servoStop' if self.rt.control_mode == 'servoj' else 'speedStop'
        why = ''
        for cycles in STOP_SPACING:
            try:
                if link.call('control', method, self.rt.acceleration):
                    return True
                why = f'{method} returned false'
            except LinkLost as exc:
                return self._stop_failed(f'{method}: {exc} (the watchdog stops the arm)')
            except RuntimeError as exc:
                why = f'{method} failed: {exc}'
            for _ in range(2):   # judge now, and again once the controller had time to act
                try:
                    sample = self._request_sample()
                except RuntimeError as exc:
                    return self._stop_failed(f'{why}, then the link was lost ({exc})')
                if not sample[0] or not sample[1]:
                    return self._stop_failed(f'{why}, then the link was lost')
                held = stop_in_effect(sample)
                if held:
                    self.events.append((time.monotonic(), 'stop_in_effect', f'{why}; {held}'))
                    _LOG.info('%s: the stop is in effect already (%s)', why, held)
                    return True
                time.sleep(cycles / self.frequency)
        self._stop_failed(why)
        with contextlib.suppress(RuntimeError):
            link.call('dashboard', 'stop')
        self.halted = True
        raise NeedsPerson(f'the controller refused to stop the arm ({why}, {len(STOP_SPACING)} '
                          'times over '
                          f'{2 * sum(STOP_SPACING)} controller cycles, its program running, the '
                          'arm powered and no safety stop); its program was stopped through the '
                          'dashboard. A person must check the arm before restarting the worker.')

    def _stop_failed(self: Any, why: str) -> bool:
        self.stop_failures += 1
        self.events.append((time.monotonic(), 'stop_failed', why))
        _LOG.error('the stop of the arm is not confirmed: %s', why)
        return False

    def _halt(self: Any) -> bool:
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
