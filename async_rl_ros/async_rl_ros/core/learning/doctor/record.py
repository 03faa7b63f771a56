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
The doctor's record: counters, events, measurements, and the one path of a detection.

:class:`DoctorRecord` is the base of :class:`~.doctor.Doctor`. Every detector ends in
:meth:`DoctorRecord._detect`, which counts the detection, applies its remedy through the
:class:`~.remedies.RemedyLedger` (cooldown) and logs and records it (rate limit); the remedies
that recovery undoes are logged and recorded the same way in :meth:`DoctorRecord.begin_step`.
"""

from __future__ import annotations

from collections import Counter, deque
import logging
from typing import Any, Mapping

from async_rl_ros.core.config import DoctorConfig
from async_rl_ros.core.learning.doctor.interface import DoctorEvent, Knobs
from async_rl_ros.core.learning.doctor.remedies import RemedyLedger

_LOG = logging.getLogger(__package__)  # the name it had when the doctor was one module


class DoctorRecord:
    """
    What the doctor has seen and done, and its notion of time (the learner update counter).

    :param cfg: thresholds; validated here (which logs the grad-clip warning if due).
    :param knobs: what remedies act on, usually the learner itself; ``None``: report only.
    """

    def __init__(self, cfg: DoctorConfig | None = None, knobs: Knobs | None = None):
        self.cfg = cfg if cfg is not None else DoctorConfig()
        self.cfg.validate()
        self.knobs = knobs
        self.remedies = RemedyLedger(knobs)
        self.step = 0
        self.events_total = 0
        self.detections: Counter[str] = Counter()
        self._events: deque[DoctorEvent] = deque(maxlen=self.cfg.max_events)
        self._values: dict[str, float] = {}  # latest measurements, published as metrics
        self._last_warn: dict[str, int] = {}

    @property
    def events(self) -> list[DoctorEvent]:
        """Return the most recent ``max_events`` events, oldest first."""
        return list(self._events)

    @property
    def remedies_total(self) -> int:
        """Return how many remedies were applied (undone ones included)."""
        return self.remedies.applied_total

    def begin_step(self, step: int) -> None:
        """
        Set the learner update counter, and undo the remedies whose symptom is gone.

        Cooldowns, rate limits and the recovery of remedies (``remedy_recovery_steps``) are
        measured in this counter.

        :param step: the learner's update count; call once per update, before the checks.
        """
        self.step = int(step)
        for undone in self.remedies.recover(self.cfg, self.step):
            reason = (f'no {undone.detector} detection for {undone.quiet_for} updates; remedy '
                      f'undone: {undone.remedy}')
            self._events.append(DoctorEvent(undone.detector, reason, float(undone.quiet_for),
                                            float(self.cfg.remedy_recovery_steps),
                                            undone.remedy, self.step))
            self.events_total += 1
            # As loud as the remedy it undoes: a knob of training changes either way.
            _LOG.warning('doctor[%s] step %d: %s', undone.detector, self.step, reason)

    def metrics(self) -> dict[str, float]:
        """
        Return the record's counters and the latest measurements.

        Keys: ``doctor/events_total``, ``doctor/remedies_total``, ``doctor/remedies_undone``,
        ``doctor/remedies_in_force``, ``doctor/detections/<detector>`` and ``doctor/<name>`` of
        every measurement taken so far.

        :returns: ``{name: value}``.
        """
        out = {
            'doctor/events_total': float(self.events_total),
            'doctor/remedies_total': float(self.remedies.applied_total),
            'doctor/remedies_undone': float(self.remedies.undone_total),
            'doctor/remedies_in_force': float(self.remedies.in_force),
        }
        out.update({f'doctor/detections/{k}': float(v) for k, v in self.detections.items()})
        out.update({f'doctor/{k}': v for k, v in self._values.items()})
        return out

    def state_dict(self) -> dict[str, Any]:
        """Return what a resumed run needs: the remedies in force (counters start anew)."""
        return {'remedies': self.remedies.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """
        Restore a :meth:`state_dict`, so that a resumed run can still undo its remedies.

        :param state: a dict made by :meth:`state_dict`.
        """
        self.remedies.load_state_dict(state['remedies'])

    def _detect(self, detector: str, reason: str, value: float, threshold: float,
                knob: str | None = None, factor: float = 1.0,
                key: str | None = None) -> DoctorEvent | None:
        """Count a detection; apply its remedy (cooldown) and log/record it (rate limit)."""
        self.detections[detector] += 1
        remedy, suffix = None, ''
        if knob is not None:
            remedy, suffix = self.remedies.treat(self.cfg, detector, knob, factor, self.step)
        key = key or detector
        last_warn = self._last_warn.get(key)
        if remedy is None and last_warn is not None and \
                self.step - last_warn < self.cfg.warn_interval_steps:
            return None
        self._last_warn[key] = self.step
        event = DoctorEvent(detector, reason + suffix, float(value), float(threshold), remedy,
                            self.step)
        self._events.append(event)
        self.events_total += 1
        _LOG.warning('doctor[%s] step %d: %s (value %.6g, threshold %.6g)%s', detector,
                     self.step, reason, value, threshold, suffix)
        return event
