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
One env worker as every transport runs it: the stepping loop around a built worker.

:class:`WorkerRuntime` runs a :class:`BuiltWorker` (built from the ``env_worker`` section by
:func:`async_rl_ros.envs.factory.build_worker`, which knows the tasks and the arms): install
policy states (and tell a physical arm's gate), pause while the learner is behind (simulated
arms only), step, hand full batches to the transport, and stop the arm when a step fails --
retried a few times, never after :class:`~async_rl_ros.core.errors.NeedsPerson`. The local
runner's worker processes and the ROS 2 ``env_worker`` node are thin shells around it.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
import time
from typing import Any, Callable

from async_rl_ros.core.errors import NeedsPerson
from async_rl_ros.core.records import PolicyState, TransitionBatch
from async_rl_ros.core.workers.env_worker import EnvWorker, WorkerPacer

__all__ = ['BuiltWorker', 'WorkerRuntime', 'backend_call']

_LOG = logging.getLogger(__name__)
PACE_SLEEP_S = 0.002    # s a paced worker idles before looking again
STEP_RETRY_S = 1.0      # s between retries after a step failed (the arm is stopped meanwhile)
MAX_STEP_FAILURES = 5   # failed steps within STEP_FAILURE_WINDOW_S before the worker gives up
STEP_FAILURE_WINDOW_S = 60.0


def backend_call(env: Any, name: str) -> None:
    """Call the arm backend's ``name`` (``stop``, ``interrupt``, ``resume``) if it has one."""
    backend = getattr(getattr(env, 'unwrapped', env), 'backend', None)
    method = getattr(backend, name, None)
    if callable(method):
        method()


@dataclasses.dataclass
class BuiltWorker:
    """
    An env worker with its environment and, on a physical arm, its policy gate.

    :param worker: the env worker.
    :param env: its environment.
    :param gate: a physical arm's policy gate (``None`` on a simulated arm).
    :param source: ``'sim'`` or ``'real'``.
    :param seed: the worker's seed.
    """

    worker: EnvWorker
    env: Any
    gate: Any
    source: str
    seed: int


class WorkerRuntime:
    """
    Step a built worker until stopped; the transport supplies weights and takes batches.

    :param built: the worker from :func:`build_worker`.
    :param send: hands a batch and the episode metrics finished with it to the
        transport; returns whether it was taken (a full queue drops it, never waits).
    :param poll_weights: returns a new policy state, or ``None`` (called between steps).
    :param log: where failures are reported.
    """

    def __init__(self, built: BuiltWorker,
                 send: Callable[[TransitionBatch, list[dict[str, float]]], bool],
                 poll_weights: Callable[[], PolicyState | None],
                 log: logging.Logger | None = None):
        self.built, self.worker = built, built.worker
        self.send, self.poll_weights = send, poll_weights
        self.log = log or _LOG
        self.pacer = WorkerPacer()
        self.stop_event = threading.Event()
        self.state = 'inactive'
        self.batches_sent = 0
        self.dropped = 0
        self.load_errors = 0
        self.policies_received = 0
        self.failures: collections.deque[float] = collections.deque()

    # ------------------------------------------------------------------ inputs
    def install(self, state: PolicyState) -> bool:
        """Load a newer policy state and tell the gate; a state that does not fit is counted."""
        try:
            used = self.worker.load_policy(state)
        except (RuntimeError, KeyError, ValueError) as exc:  # another architecture
            self.load_errors += 1
            self.log.error('weights do not fit the policy: %s', exc)
            return False
        if used and self.built.gate is not None:
            self.built.gate.policy_loaded(self.worker.policy.version)
        return used

    def weights_rejected(self, reason: str) -> None:
        """Count a rejected packet: a real arm holds still on a CRC failure."""
        if reason == 'crc' and self.built.gate is not None:
            self.built.gate.crc_failure()

    def receive(self, receiver: Any) -> PolicyState | None:
        """
        Poll a :class:`~async_rl_ros.core.weights.receiver.WeightReceiver` for a new policy.

        Rejected packets are logged with their reasons and the last good policy stays in use;
        those that failed their CRC reach the gate (a real arm holds still).
        """
        before = receiver.rejections()
        state = receiver.poll()
        new = receiver.rejections() - before
        if new:
            self.log.warning('worker %d rejected %d weight packets (%s); acting with policy '
                             'version %d', self.worker.worker_id, sum(new.values()),
                             ', '.join(f'{k}: {v}' for k, v in sorted(new.items())),
                             self.worker.policy.version)
            for _ in range(new['crc']):
                self.weights_rejected('crc')
        self.policies_received += state is not None
        return state

    def learner_heard(self, policy_version: int, received: int, wanted: int) -> None:
        """Take the learner's counters: the gate's heartbeat, a simulated arm's pacing."""
        if self.built.gate is not None:
            self.built.gate.heartbeat(int(policy_version))
        else:  # a real arm runs in real time: never paced
            self.pacer.report(received, wanted, self.worker.steps)

    # ------------------------------------------------------------------ stepping
    def run(self) -> None:
        """
        Step until :meth:`stop`; a failed step stops the arm and is retried a few times.

        The backend recovers what it can on the next step (a real arm: reconnect, restart
        the control script, re-read the state); ``NeedsPerson`` is never retried.
        """
        self.state = 'active'
        while not self.stop_event.is_set():
            try:
                self._step_until_stopped()
            except NeedsPerson as exc:
                self.state = 'halted: needs a person'
                self.log.critical('worker %d halted; a person must check the arm before it '
                                  'is restarted: %s', self.worker.worker_id, exc)
            except Exception as exc:  # noqa: B902 -- a step failed: stop the arm, retry
                if self.stop_event.is_set():
                    break  # a step interrupted by stop(): expected
                now = time.monotonic()
                self.failures.append(now)
                while self.failures[0] < now - STEP_FAILURE_WINDOW_S:
                    self.failures.popleft()
                self.log.error('worker %d: step failed (%r), %d in %.0f s',
                               self.worker.worker_id, exc, len(self.failures),
                               STEP_FAILURE_WINDOW_S)
                self.stop_arm()
                if len(self.failures) < MAX_STEP_FAILURES:
                    self.stop_event.wait(STEP_RETRY_S)
                    continue
                self.state = 'error'
                self.log.error('worker %d stopped stepping after %d failed steps',
                               self.worker.worker_id, len(self.failures))
            break
        self.stop_arm()
        if self.state == 'active':
            self.state = 'inactive'

    def _step_until_stopped(self) -> None:
        worker = self.worker
        while not self.stop_event.is_set():
            state = self.poll_weights()
            if state is not None:
                self.install(state)
            if self.pacer.should_pause(worker.steps):
                # Ahead of the learner: let it catch up, sending on what it would count stale.
                self._hand_over(worker.flush_stale())
                self.stop_event.wait(PACE_SLEEP_S)
                continue
            self._hand_over(worker.step())

    def _hand_over(self, batch: TransitionBatch | None) -> None:
        if batch is None:
            return
        if self.send(batch, self.worker.take_episode_metrics()):
            self.batches_sent += 1
        else:
            self.dropped += 1

    def stop(self) -> None:
        """Ask :meth:`run` to return; a step held by a real arm's gate returns at once."""
        self.stop_event.set()
        backend_call(self.built.env, 'interrupt')

    def stop_arm(self) -> None:
        """Stop the arm (a simulated one: nothing to do); report, never raise."""
        try:
            backend_call(self.built.env, 'stop')
        except Exception as exc:  # noqa: B902 -- report; the watchdog still stops the arm
            self.log.error('stopping the arm failed: %s', exc)
