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
One RL step of the ur5 backend: the checked command, the wait to the step's end, the verdict.

:class:`Stepping` is a mixin of :class:`async_rl_ros.envs.ur5_rtde.UR5RTDE` (it uses that
class's ``link``, ``rt``, ``clock``, ``budget``, ``events``...). The client process sends a
command only against a sample it has just read, in the same request: a controller that does
not run or a sample older than one control period sends nothing. Whatever goes wrong becomes
a *cause* ``(kind, why)``; the step then ends early with the fresh state read after the
recovery, and the env truncates the episode (:meth:`Stepping._interrupt_step`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from async_rl_ros.envs.arm import ArmState
from async_rl_ros.envs.rtde_moves import floats
from async_rl_ros.envs.rtde_recovery import BackendInterrupted, Cause
from async_rl_ros.envs.rtde_supervisor import HALT_MASK, NeedsPerson, Verdict
import numpy as np

__all__ = ['Stepping']

_LOG = logging.getLogger('async_rl_ros.envs.ur5_rtde')
_STALE = 'stale data', 'stale controller state'


class Stepping:
    """The inside of :meth:`~async_rl_ros.envs.ur5_rtde.UR5RTDE.step`."""

    def _fresh_or(self: Any, cause: Cause | None, sample: tuple | None = None
                  ) -> tuple[ArmState | None, Cause | None]:
        """
        Read the state; a stale sample or a lost client becomes the cause (if none yet).

        ``sample`` (or else the one the supervisor's verdict was drawn from just before) is
        used when there is one (one request fewer per check).
        """
        sample, self._sample = sample or self._sample, None
        try:
            state = self._to_state(sample) if sample is not None else self.read()
        except RuntimeError as exc:
            if isinstance(exc, (NeedsPerson, BackendInterrupted)):
                raise
            return None, cause or ('lost link', f'lost the RTDE connection ({exc})')
        if cause is None and self.clock.age(time.monotonic()) > self.dt:
            cause = self._stale()
        return state, cause

    def _stale(self: Any) -> Cause:
        self._stop_motion()  # the next command would act on an old observation
        self.events.append((time.monotonic(), 'stale', _STALE[1]))
        self.budget.missed('stale')
        return _STALE

    def _checked(self: Any, sample: tuple | None) -> tuple[ArmState | None, Cause | None]:
        """Judge a sample: recover unless the controller runs; the state and the cause."""
        if sample is not None and self._classify(sample)[0] is Verdict.RUN:
            return self._fresh_or(None, sample)
        return self._fresh_or(self._ensure_ready())

    def _interrupt_step(self: Any, cause: Cause) -> ArmState:
        kind, why = cause
        self.interrupted, self.interruption = why, kind
        self.interruptions[kind] += 1
        self._servo_target = None
        self.budget.abandon()
        state = self._require_fresh()
        self.budget.observed(time.monotonic(), time.monotonic())
        return state

    def _command(self: Any, qd: np.ndarray) -> tuple[bool, Cause | None]:
        """
        Send this step's command, checked against the newest sample in the same request.

        :returns: whether the controller took it, and why it was not sent (``None``: sent).
        """
        if self.clock.offset is None:
            self._require_fresh()   # no clock yet: the client could not judge the age
        v = qd * self.scale
        if self.rt.control_mode == 'servoj':
            # Integrate the position targets (the trajectory the safety filter approved),
            # anchored at the measured joints after every reset or interruption.
            anchor = self._last_q if self._servo_target is None else self._servo_target
            target = anchor + v * self.dt
            method, args = 'servoJ', [floats(target), 0.0, 0.0, self.dt,
                                      self.rt.servoj_lookahead, self.rt.servoj_gain]
        else:
            target = None
            method, args = 'speedJ', [floats(v), self.rt.acceleration, self.dt]
        start = time.monotonic()
        try:
            result, sample = self.link.request('command', method, args, self.clock.offset,
                                               self.dt, HALT_MASK)
        except RuntimeError as exc:   # LinkLost, or the client raised
            _LOG.warning('command failed: %s', exc)
            self.budget.abandon()
            return False, self._ensure_ready() or ('command refused',
                                                   f'the command failed ({exc})')
        if result is None:   # not sent: the controller does not run, or the state is old
            self.budget.abandon()
            state, cause = self._checked(sample)
            return False, cause or self._stale()
        now = time.monotonic()
        self._to_state(sample)
        self.budget.commanded(now, now - start)
        self._servo_target = target
        return bool(result), None

    def _wait_step(self: Any) -> tuple | None:
        """
        Sleep (in the client) until the end of the RL step; return the sample read then.

        Steps keep a fixed cadence of ``task.dt``: the time the supervisor and the env spend
        comes out of the wait (the cadence restarts after a longer interruption).
        """
        now = time.monotonic()
        if self._step_end is None or now - self._step_end > self.dt:
            self._step_end = now  # first step, or after a pause: restart the cadence
        self._step_end += self.dt
        try:
            return self.link.request('wait', self._step_end,
                                     timeout=self._step_end - now + self.rt.client_timeout_s)
        except RuntimeError as exc:
            _LOG.warning('wait failed: %s', exc)  # the supervisor looks at the link next
            return None
