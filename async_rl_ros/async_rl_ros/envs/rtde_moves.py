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
Reset moves of the ur5 backend: the checked path and the watched ``moveJ``.

:class:`Moves` is a mixin of :class:`async_rl_ros.envs.ur5_rtde.UR5RTDE`. The target and the
straight joint-space path to it are checked against the safety filter's limits and box
before anything moves; the move itself is asynchronous, the watchdog kicked and the
controller judged until the arm rests at the target. A move that is cut returns why (the
backend recovers and tries again), never raises.
"""

from __future__ import annotations

import time
from typing import Any

from async_rl_ros.envs.rtde_recovery import BackendInterrupted
from async_rl_ros.envs.rtde_supervisor import NeedsPerson, Verdict
import numpy as np

__all__ = ['Moves', 'floats']

_REST_SPEED = 1e-3      # rad/s: below this on every joint the arm counts as at rest
_REST_ERROR = 2e-3      # rad: reset target reached


def floats(values: Any) -> list[float]:
    """Convert to a list of Python float values, as the client's bindings take them."""
    return [float(x) for x in values]


class Moves:
    """Reset moves of :class:`~async_rl_ros.envs.ur5_rtde.UR5RTDE`."""

    def _move_to(self: Any, q: np.ndarray) -> str:
        """Asynchronous moveJ to ``q``; kick the watchdog until at rest there; why it was cut."""
        link = self.link
        speed = self.rt.reset_speed * self.scale
        try:
            state = self.read()
            distance = float(np.max(np.abs(q - state.q)))
            if distance < _REST_ERROR:
                return ''
            if not link.call('control', 'moveJ', floats(q), speed, self.rt.reset_acceleration,
                             True):
                return 'the controller refused the reset moveJ'
            limit = 3.0 * (distance / speed + speed / self.rt.reset_acceleration) + 2.0
            deadline = time.monotonic() + limit
            while time.monotonic() < deadline:
                self._sleep(5.0 * (1.0 / self.frequency) + 0.01)
                link.call('control', 'kickWatchdog')
                verdict, why = self._verdict()
                if verdict is not Verdict.RUN:
                    self.events.append((time.monotonic(), 'reset_interrupted', why))
                    return why
                state = self.read()
                if float(np.max(np.abs(q - state.q))) < _REST_ERROR and \
                        float(np.max(np.abs(state.qd))) < _REST_SPEED:
                    return ''
        except RuntimeError as exc:   # LinkLost, the client raised: recovered before a retry
            if isinstance(exc, (NeedsPerson, BackendInterrupted)):
                raise
            self.events.append((time.monotonic(), 'reset_interrupted', str(exc)))
            return str(exc)
        self._stop_motion()
        why = f'the reset moveJ did not reach {np.round(q, 3).tolist()} within {limit:.1f} s'
        self.events.append((time.monotonic(), 'reset_interrupted', why))
        return why

    def _check_reset_path(self: Any, q0: np.ndarray, q1: np.ndarray) -> None:
        """Refuse a reset target outside the limits or a joint-space path leaving the box."""
        f = self.filter
        for i, (x, lo, hi) in enumerate(zip(q1, f.q_low, f.q_high)):
            if not lo <= x <= hi:
                raise NeedsPerson(f'reset target joint {i} = {x:.3f} rad is outside the safety '
                                  f'limits [{lo:.3f}, {hi:.3f}]')
        allowed = f.pose_violation(q0) + 1e-9
        for s in np.linspace(0.0, 1.0, 33)[1:]:
            q = q0 + s * (q1 - q0)
            if f.pose_violation(q) > allowed:
                points = f.points(q)
                worst = max(range(len(points)), key=lambda i: f.violation(points[i]))
                raise NeedsPerson(
                    f'the moveJ from {np.round(q0, 3).tolist()} to {np.round(q1, 3).tolist()} '
                    f'would take the {("flange", "tool tip")[worst]} to '
                    f'{tuple(round(x, 3) for x in points[worst])} m, outside the safety box: '
                    'jog the arm back by hand (freedrive) before restarting')
