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
The learner's ``/diagnostics``: the doctor, the ingest path, every worker and every shard.

One status each, what rqt_robot_monitor shows.

Levels follow what the learner logs: the doctor's status is WARN for as long as its detectors
keep finding something (a warning logged every ``warn_interval_steps`` is the same finding
seen again), ERROR after ``max_consecutive_skips`` skipped steps; a worker or shard silent for
``worker_timeout_s`` is STALE.
"""

from __future__ import annotations

from typing import Any, Mapping

from diagnostic_msgs.msg import DiagnosticStatus, KeyValue

__all__ = ['LearnerDiagnostics', 'diagnostic_status', 'OK', 'WARN', 'ERROR', 'STALE']

OK, WARN, ERROR, STALE = 0, 1, 2, 3  # diagnostic_msgs/DiagnosticStatus levels


def diagnostic_status(name: str, level: int, message: str, values: Mapping[str, Any],
                      hardware_id: str = '') -> DiagnosticStatus:
    """Return a ``DiagnosticStatus`` with ``values`` as key-value strings."""
    status = DiagnosticStatus()
    status.name = name
    status.hardware_id = hardware_id
    status.level = bytes([level])
    status.message = message
    status.values = [KeyValue(key=str(k), value=str(v)) for k, v in values.items()]
    return status


class LearnerDiagnostics:
    """
    Build the learner's statuses; remembers what it saw last time (new findings, refusals).

    :param learner: the :class:`~async_rl_ros.core.learning.learner.Learner`.
    :param committer: the learner's shard committer (its version and shard count).
    :param doctor_cfg: the ``doctor`` section (``max_consecutive_skips``, ``max_policy_lag``).
    :param transport: the live ``ros_transport`` section (``worker_timeout_s``: silence after
        which a worker or shard is STALE; read at every call, so ``ros2 param set`` applies).
    :param ingest: the learner's :class:`~async_rl_ros.ros.ingest.TransitionIngest` (its
        counts and its refusals by reason).
    """

    def __init__(self, learner: Any, committer: Any, doctor_cfg: Any, transport: Any,
                 ingest: Any):
        self.learner, self.committer, self.cfg = learner, committer, doctor_cfg
        self.transport, self.ingest = transport, ingest
        self._findings = 0
        self._ingest_seen = (0, 0)
        self._shard_rejected: dict[int, int] = {}
        self._worker_rejected: dict[int, int] = {}

    def statuses(self, now: float, *, workers: Mapping[int, Mapping[str, Any]],
                 shards: Mapping[int, tuple[float, Any]], topics: int
                 ) -> list[DiagnosticStatus]:
        """
        Return every status at ``now`` (``time.monotonic()``).

        :param workers: per worker id, ``transitions``, ``batches``, ``policy_version``,
            ``last_seen``, ``source`` and, once one arrived, ``status`` (a ``WorkerStatus``)
            with its ``status_time``.
        :param shards: per shard id, ``(time received, ShardStatus)``.
        :param topics: transition topics subscribed.
        """
        out = [self._doctor(), self._ingest(topics)]
        out += [self._worker(now, worker_id, info) for worker_id, info in sorted(workers.items())]
        out += [self._shard(now, shard_id, shards.get(shard_id, (0.0, None)))
                for shard_id in range(self.committer.cfg.num_shards)]
        return out

    def _doctor(self) -> DiagnosticStatus:
        learner, doctor = self.learner, self.learner.doctor
        findings = sum(doctor.detections.values())
        new, self._findings = findings - self._findings, findings
        if doctor.consecutive_skips >= self.cfg.max_consecutive_skips:
            level, message = ERROR, f'{doctor.consecutive_skips} consecutive skipped steps'
        elif new:
            last = doctor.events[-1] if doctor.events else None
            level = WARN
            message = f'{new} new finding(s)' + (f', last: {last.detector}: {last.reason}'
                                                 if last else '')
        else:
            level, message = OK, 'healthy'
        values = {'updates': learner.updates, 'env_steps': learner.env_steps,
                  'policy_version': learner.policy_version, **doctor.metrics()}
        return diagnostic_status('learner: training doctor', level, message, values, 'learner')

    def _ingest(self, topics: int) -> DiagnosticStatus:
        counts, rejected = self.ingest.counts(), self.ingest.rejected()
        seen = (counts['dropped'], sum(rejected.values()))
        fresh = seen[0] > self._ingest_seen[0] or seen[1] > self._ingest_seen[1]
        self._ingest_seen = seen
        return diagnostic_status(
            'learner: ingest', WARN if fresh else OK,
            'dropping or rejecting batches' if fresh else 'ok',
            {**counts, **{f'rejected_{k}': v for k, v in rejected.items()},
             'topics': topics},
            'learner')

    def _worker(self, now: float, worker_id: int, info: Mapping[str, Any]
                ) -> DiagnosticStatus:
        last = max(info.get('last_seen', 0.0), info.get('status_time', 0.0))
        lag = (self.learner.policy_version - info['policy_version']
               if info.get('policy_version', -1) >= 0 else None)
        status = info.get('status')
        if now - last > self.transport.worker_timeout_s:
            level, message = STALE, f'silent for {now - last:.0f} s'
        elif lag is not None and lag > self.cfg.max_policy_lag:
            level, message = WARN, f'policy lag {lag} > {self.cfg.max_policy_lag:g}'
        else:
            level, message = OK, 'stepping'
        values = {'source': info.get('source', ''), 'transitions': info['transitions'],
                  'batches': info['batches'], 'policy_lag': '' if lag is None else lag}
        if status is not None:
            values.update(state=status.state, steps=status.steps,
                          steps_per_s=f'{status.steps_per_s:.1f}',
                          weights_accepted=status.weights_accepted,
                          weights_rejected=status.weights_rejected,
                          success_rate=f'{status.success_rate:.2f}')
            before = self._worker_rejected.get(worker_id, 0)
            self._worker_rejected[worker_id] = status.weights_rejected
            if status.weights_rejected > before and level == OK:
                level = WARN
                message = f'rejected {status.weights_rejected - before} weight packets'
        return diagnostic_status(f'env_worker: worker_{worker_id}', level, message, values,
                                 f'worker_{worker_id}')

    def _shard(self, now: float, shard_id: int, entry: tuple[float, Any]) -> DiagnosticStatus:
        stamp, status = entry
        if status is None or now - stamp > self.transport.worker_timeout_s:
            level, message, values = STALE, 'no status', {}
        else:
            # The status is up to one period old: 'behind' is informative, not a fault.
            refused = status.commits_rejected > self._shard_rejected.get(shard_id, 0)
            self._shard_rejected[shard_id] = status.commits_rejected
            if status.needs_full:
                level, message = WARN, 'waiting for a full commit'
            elif refused:
                level, message = WARN, 'refused commits'
            else:
                level, message = OK, f'version {status.version}'
            values = {'version': status.version,
                      'behind': self.committer.version - status.version,
                      'partitions': status.partitions,
                      'commits_applied': status.commits_applied,
                      'commits_rejected': status.commits_rejected}
        return diagnostic_status(f'param_server: shard_{shard_id}', level, message, values,
                                 f'shard_{shard_id}')
