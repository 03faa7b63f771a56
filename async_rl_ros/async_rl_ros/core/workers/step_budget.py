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
The step budget of an arm's control loop: observation in, policy, filter, command out.

A step on a physical arm starts when its control period ends (the controller's state is
due), and its budget is spent on four phases: ``observation`` (waking up and reading the
controller's state), ``policy`` (inference), ``filter`` (everything else between the
observation and the command: the env's observation and safety filter, the worker's
bookkeeping) and ``command`` (the command's way to the controller, its status check
included). A step whose command goes out later than one control period after its state was
due misses its deadline; the miss is counted under the phase that took longest.

The arm backend owns a :class:`StepBudget` (it sees the observation and the command); a
policy reports its inference time with :func:`note`, which lands in the current step of the
calling thread (the control loop runs the policy and the backend on one thread). Torch-free.
"""

from __future__ import annotations

import collections
import threading
from typing import Any

import numpy as np

__all__ = ['PHASES', 'Percentiles', 'StepBudget', 'note', 'loop_health']

#: Phases of a step, in order.
PHASES = ('observation', 'policy', 'filter', 'command')
_WINDOW = 10_000   # most recent values the percentiles are taken over

_local = threading.local()


def note(phase: str, seconds: float) -> None:
    """Add ``seconds`` to ``phase`` of this thread's current step (a no-op outside a step)."""
    trace = getattr(_local, 'trace', None)
    if trace is not None:
        trace[phase] = trace.get(phase, 0.0) + float(seconds)


class Percentiles:
    """Durations (ms) of the most recent ``size`` events and their count."""

    def __init__(self, size: int = _WINDOW):
        self._values: collections.deque[float] = collections.deque(maxlen=int(size))
        self.count = 0

    def add(self, ms: float) -> None:
        """Record one duration (ms)."""
        self._values.append(float(ms))
        self.count += 1

    def summary(self) -> dict[str, float]:
        """Return ``n`` and, once there is a value, ``p50``, ``p90``, ``p99``, ``max`` (ms)."""
        if not self._values:
            return {'n': 0}
        values = np.fromiter(self._values, dtype=np.float64)
        p50, p90, p99 = np.percentile(values, (50.0, 90.0, 99.0))
        return {'n': self.count, 'p50': round(float(p50), 3), 'p90': round(float(p90), 3),
                'p99': round(float(p99), 3), 'max': round(float(values.max()), 3)}


class StepBudget:
    """
    Time every step of one control loop and count its deadline misses by cause.

    :param deadline_s: the longest a step may take (s): one control period.
    """

    def __init__(self, deadline_s: float):
        self.deadline_s = float(deadline_s)
        self.steps = Percentiles()
        self.phases = {phase: Percentiles() for phase in PHASES}
        self.misses: collections.Counter[str] = collections.Counter()
        self.first_action_ms: float | None = None
        self._due: float | None = None
        self._observation = 0.0

    def observed(self, due: float, now: float) -> None:
        """
        Open the step that was due at ``due``: its state is in hand at ``now`` (monotonic s).

        The step belongs to the calling thread: :func:`note` adds to it from here on.
        """
        self._due = float(due)
        self._observation = max(0.0, float(now) - self._due)
        _local.trace = {}

    def abandon(self) -> None:
        """Forget the open step (no command follows it: a hold, a recovery, a reset)."""
        self._due = None
        _local.trace = None

    def missed(self, cause: str) -> None:
        """Count a step that could not be commanded in time (e.g. ``'stale'`` state)."""
        self.misses[cause] += 1
        self.abandon()

    def commanded(self, now: float, command_s: float) -> float | None:
        """
        Close the step: its command went out at ``now`` after ``command_s`` on the link.

        :returns: the step's duration (ms), or ``None`` without an open step.
        """
        trace = getattr(_local, 'trace', None) or {}
        _local.trace = None
        if self._due is None:
            return None
        total = max(0.0, float(now) - self._due)
        self._due = None
        policy = trace.get('policy', 0.0)
        parts = {'observation': self._observation, 'policy': policy, 'command': command_s}
        parts['filter'] = max(0.0, total - sum(parts.values()))
        for phase, seconds in parts.items():
            self.phases[phase].add(1000.0 * seconds)
        if 'policy' in trace and self.first_action_ms is None:
            self.first_action_ms = round(1000.0 * policy, 3)
        ms = 1000.0 * total
        self.steps.add(ms)
        if total > self.deadline_s:
            self.misses[max(parts, key=parts.get)] += 1
        return ms

    def summary(self) -> dict[str, Any]:
        """
        Return the figures for diagnostics and the run summary.

        ``step_ms``: percentiles of whole steps; ``phase_ms``: of each phase;
        ``deadline_ms``: the budget; ``deadline_misses``: misses by cause;
        ``first_action_ms``: inference time of the first step the policy acted in.
        """
        return {'step_ms': self.steps.summary(),
                'phase_ms': {p: s.summary() for p, s in self.phases.items()},
                'deadline_ms': round(1000.0 * self.deadline_s, 3),
                'deadline_misses': dict(self.misses),
                'first_action_ms': self.first_action_ms}


def loop_health(summary: dict[str, Any], misses_before: int
                ) -> tuple[str, str, dict[str, Any], int]:
    """
    Judge an arm's control loop from its backend's summary, for ``/diagnostics``.

    :param summary: the arm backend's ``summary()`` (:meth:`StepBudget.summary` included).
    :param misses_before: deadline misses at the previous judgement.
    :returns: ``(level, message, values, misses)``: ``'ok'`` or ``'warn'`` (deadlines missed
        since the previous judgement, or a real-time priority the OS refused), a one-line
        message, flat key-values (step and phase percentiles, misses by cause, interrupted
        steps by kind, the object poses received and refused by reason, priorities),
        and the miss count to pass next time.
    """
    step = summary.get('step_ms', {})
    misses = summary.get('deadline_misses', {})
    total = int(sum(misses.values()))
    values: dict[str, Any] = {'deadline_ms': summary.get('deadline_ms'),
                              'steps': step.get('n', 0),
                              'first_action_ms': summary.get('first_action_ms')}
    for key in ('p50', 'p99', 'max'):
        values[f'step_{key}_ms'] = step.get(key)
    for phase, figures in summary.get('phase_ms', {}).items():
        values[f'{phase}_p99_ms'] = figures.get('p99')
    values.update({f'misses_{cause}': n for cause, n in sorted(misses.items())})
    values.update({'interrupted_' + kind.replace(' ', '_'): n
                   for kind, n in sorted(summary.get('interruptions', {}).items())})
    pose = summary.get('object_pose')   # a physical cube cell: the camera's poses
    if pose is not None:
        values['object_pose_received'] = pose['received']
        values.update({'object_pose_refused_' + why.replace(' ', '_'): n
                       for why, n in sorted(pose['refused'].items())})
    realtime = summary.get('realtime', {})
    values.update({'client_priority': realtime.get('client_priority'),
                   'control_priority': realtime.get('control_priority')})
    new = total - int(misses_before)
    if new > 0:
        return ('warn', f'{new} control steps missed their deadline since the last report',
                values, total)
    if realtime.get('refused'):
        return 'warn', f'normal priority: {realtime["refused"]}', values, total
    return 'ok', f'step p99 {step.get("p99", "-")} ms', values, total
