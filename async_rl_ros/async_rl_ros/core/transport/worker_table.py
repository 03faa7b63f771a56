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
The learner's table of its workers, and the fleet metrics drawn from it.

A worker is known from its first batch or its first status report, whichever comes first. Per
worker the table keeps the transitions and batches received, the policy version the newest
batch was acted with, where the worker runs (``source``), when it was last heard of, and its
newest status report. Reports also bring the episodic return of the episodes they cover; the
metrics average those over episodes since the previous call.

Transport-neutral: a status is any object with the fields of a ``WorkerStatus`` message that
are read here (``source``, ``episodes``, ``episodic_return``, ``success_rate``,
``weights_rejected``). Thread-safe: subscriptions, the training thread and timers use one
table.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

__all__ = ['WorkerTable']


class WorkerTable:
    """Transitions, policy versions and status reports of every worker, by worker id."""

    def __init__(self):
        self._lock = threading.Lock()
        self._workers: dict[int, dict[str, Any]] = {}
        self._returns: list[tuple[float, int]] = []  # (mean return, episodes) per report

    def __len__(self) -> int:
        """Return the number of workers heard of."""
        with self._lock:
            return len(self._workers)

    def _entry(self, worker_id: int, source: str) -> dict[str, Any]:
        return self._workers.setdefault(int(worker_id), {
            'transitions': 0, 'batches': 0, 'policy_version': -1, 'source': source,
            'last_seen': 0.0, 'status': None, 'status_time': 0.0})

    def received(self, worker_id: int, transitions: int, policy_version: int, source: str,
                 now: float) -> None:
        """
        Record a batch of a worker.

        :param transitions: its rows.
        :param policy_version: the newest policy version among them (-1: none known).
        :param now: ``time.monotonic()`` at its arrival.
        """
        with self._lock:
            info = self._entry(worker_id, source)
            info['transitions'] += int(transitions)
            info['batches'] += 1
            info['policy_version'] = int(policy_version)
            info['source'] = source
            info['last_seen'] = float(now)

    def reported(self, worker_id: int, status: Any, now: float) -> None:
        """
        Record a worker's status report (and the return of the episodes it covers).

        :param status: the report (``WorkerStatus`` fields, see the module docstring).
        :param now: ``time.monotonic()`` at its arrival.
        """
        with self._lock:
            info = self._entry(worker_id, status.source)
            info['status'] = status
            info['status_time'] = float(now)
            if status.episodes:
                self._returns.append((float(status.episodic_return), int(status.episodes)))

    def snapshot(self) -> dict[int, dict[str, Any]]:
        """Return a copy of every worker's entry (the keys of :meth:`received`, ``status``)."""
        with self._lock:
            return {k: dict(v) for k, v in self._workers.items()}

    def statuses(self) -> list[Any]:
        """Return the newest status report of every worker that sent one."""
        with self._lock:
            return self._statuses()

    def lags(self, version: int) -> list[int]:
        """Return how many versions behind ``version`` each worker with a known version acts."""
        with self._lock:
            return self._lags(version)

    def _statuses(self) -> list[Any]:
        return [w['status'] for w in self._workers.values() if w['status'] is not None]

    def _lags(self, version: int) -> list[int]:
        return [version - w['policy_version'] for w in self._workers.values()
                if w['policy_version'] >= 0]

    def metrics(self, version: int) -> dict[str, float]:
        """
        Return the fleet metrics; the episodic returns reported since the last call are used up.

        :param version: the learner's policy version (the lags are measured from it).
        :returns: ``charts/policy_lag_mean``, ``charts/policy_lag_max``,
            ``transport/rejected_weights`` (packets the workers refused, in total) and
            ``transport/workers`` (workers that reported), and, when there is one,
            ``charts/episodic_return`` (mean over the episodes) and ``charts/success_rate``
            (mean over the workers).
        """
        with self._lock:  # one snapshot: lags, reports and returns of the same moment
            lags, statuses = self._lags(version), self._statuses()
            returns, self._returns = self._returns, []
        out = {'charts/policy_lag_mean': float(np.mean(lags)) if lags else 0.0,
               'charts/policy_lag_max': float(max(lags)) if lags else 0.0,
               'transport/rejected_weights': float(sum(int(s.weights_rejected)
                                                       for s in statuses)),
               'transport/workers': float(len(statuses))}
        if returns:
            episodes = sum(n for _, n in returns)
            out['charts/episodic_return'] = sum(r * n for r, n in returns) / episodes
        if statuses:
            out['charts/success_rate'] = float(np.mean([s.success_rate for s in statuses]))
        return out
