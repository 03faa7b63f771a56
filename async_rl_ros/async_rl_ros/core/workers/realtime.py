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
Keeping an arm's deadline beside a learner on the same machine: priorities and cores.

The normal set-up trains on the machine that drives the arm. The defaults, chosen from the
machine when the arm's control loop starts:

* **Real-time priority.** The control-loop thread (the one that calls the backend's
  ``step``) takes ``SCHED_FIFO`` priority :data:`CONTROL_PRIORITY`, the ur_rtde client
  process :data:`RTDE_PRIORITY` (its receive thread must drain the controller's packets
  first; ur_rtde's own ``rt_priority`` gets the same value). Both sleep most of the time,
  so they take little CPU, but take it at once. Where the OS refuses (no root, no
  ``CAP_SYS_NICE``, no ``rtprio`` limit), one line says so and how to allow it, and the
  loop runs at normal priority.
* **Cores.** With :data:`MIN_CPUS_TO_PIN` or more CPUs the last one is the arm's (control
  thread and client process) and the learner keeps the others (:func:`cpu_plan`, for the
  learner's set-up: its affinity and torch threads); with fewer, they share every core and
  the priority alone keeps the deadline.
* **Threads.** Inference on one intra-op thread
  (:func:`async_rl_ros.core.workers.inference.control_threads`).

Torch-free and Linux-first: elsewhere every call reports that it did nothing.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading

__all__ = ['CONTROL_PRIORITY', 'RTDE_PRIORITY', 'MIN_CPUS_TO_PIN', 'CpuPlan', 'cpu_plan',
           'take_priority', 'pin', 'control_priority', 'ControlThread', 'keep_off_the_arm']

_LOG = logging.getLogger(__name__)
CONTROL_PRIORITY = 30   #: SCHED_FIFO priority of the control-loop thread
RTDE_PRIORITY = 40      #: SCHED_FIFO priority of the ur_rtde client process
MIN_CPUS_TO_PIN = 4     #: below this many CPUs nothing is pinned
_HOW = ('allow it with `ulimit -r 50` (rtprio in /etc/security/limits.conf) or '
        'CAP_SYS_NICE')
_told: set[str] = set()


@dataclasses.dataclass(frozen=True)
class CpuPlan:
    """Which CPUs the arm and the learner use; ``None``: every CPU (nothing pinned)."""

    arm: frozenset[int] | None
    learner: frozenset[int] | None
    learner_threads: int


def _cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:
        return list(range(os.cpu_count() or 1))


def cpu_plan(cpus: list[int] | None = None) -> CpuPlan:
    """Return the default split of ``cpus`` (default: this process's) between arm and learner."""
    cpus = sorted(cpus if cpus is not None else _cpus())
    if len(cpus) < MIN_CPUS_TO_PIN:
        return CpuPlan(None, None, max(1, len(cpus) - 1))
    return CpuPlan(frozenset(cpus[-1:]), frozenset(cpus[:-1]), len(cpus) - 1)


def keep_off_the_arm() -> tuple[CpuPlan, list[int]]:
    """
    Keep the calling thread, and what it starts from now on, off the arm's CPU.

    For the learner's main thread on the machine that drives a physical arm, before it starts
    its shard, evaluator and worker processes: they inherit the learner's CPUs. The worker
    process takes the machine's CPUs back (the second value) so that its control thread can
    take the arm's CPU (:class:`ControlThread`).

    :returns: the plan and every CPU this thread had before.
    """
    every = _cpus()
    plan = cpu_plan(every)
    why = pin(plan.learner)
    if why is not None:
        _LOG.warning('the learner shares the arm CPU: %s', why)
    elif plan.learner is not None:
        _LOG.info('learner on CPUs %s, the arm on CPU %s', sorted(plan.learner),
                  sorted(plan.arm or ()))
    return plan, every


def take_priority(priority: int, who: str) -> str | None:
    """
    Give the calling thread ``SCHED_FIFO`` ``priority``; ``priority <= 0`` asks for none.

    :returns: ``None`` when it runs at that priority, else why not (also logged, one line,
        once per ``who``).
    """
    if priority <= 0:
        return 'not asked for'
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(int(priority)))
        return None
    except AttributeError:
        why = 'real-time scheduling is not available on this OS'
    except OSError as exc:
        why = f'the OS refused SCHED_FIFO priority {priority} ({exc.strerror or exc})'
    if who not in _told:
        _told.add(who)
        _LOG.warning('%s runs at normal priority: %s; %s', who, why, _HOW)
    return why


def pin(cpus: frozenset[int] | None) -> str | None:
    """Keep the calling thread on ``cpus`` (``None``: leave it); returns why not, or None."""
    if cpus is None:
        return None
    try:
        os.sched_setaffinity(0, cpus)
        return None
    except (AttributeError, OSError) as exc:
        return str(exc)


def control_priority(rtde_priority: int) -> int:
    """Return the control-loop thread's priority for a client process at ``rtde_priority``."""
    return max(1, int(rtde_priority) - 10) if rtde_priority > 0 else 0


class ControlThread:
    """
    Set up whichever thread runs an arm's control loop, and give it back as it was.

    :param priority: ``SCHED_FIFO`` priority of that thread (0: normal priority).
    """

    def __init__(self, priority: int = CONTROL_PRIORITY):
        self.priority = int(priority)
        self.tid: int | None = None
        self._before: tuple | None = None
        self.got: dict[str, object] = {}   #: ``priority`` (0: none) and ``cpus`` (None: all)

    def enter(self) -> None:
        """Make the calling thread the control loop (once; a new thread takes over)."""
        tid = threading.get_native_id()
        if tid == self.tid:
            return
        self.restore()
        try:
            self._before = (os.sched_getscheduler(0), os.sched_getparam(0),
                            os.sched_getaffinity(0))
        except (AttributeError, OSError):
            self._before = None
        self.tid = tid
        name = threading.current_thread().name
        refused = take_priority(self.priority, f'the arm control loop (thread {name})')
        plan = cpu_plan()
        pinned = plan.arm is not None and pin(plan.arm) is None
        self.got = {'priority': 0 if refused else self.priority,
                    'cpus': sorted(plan.arm) if pinned else None}

    def restore(self) -> None:
        """Give the thread its scheduling and CPUs back (it may have ended: nothing to do)."""
        tid, before, self.tid, self._before = self.tid, self._before, None, None
        if tid is None or before is None:
            return
        try:
            os.sched_setscheduler(tid, before[0], before[1])
            os.sched_setaffinity(tid, before[2])
        except OSError:
            pass
