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
The remedies a training doctor applied: their cooldowns, their undoing, their checkpoint state.

A remedy is a treatment, not a new setting. Each one multiplies a learner knob by a factor
(:class:`~async_rl_ros.core.learning.doctor.interface.Knobs`). Once its detector has stayed
quiet for ``remedy_recovery_steps`` learner updates, the ledger applies the inverse factor. It
undoes one remedy per quiet interval, the most recent first, until the knob is back where the
configuration put it. Without this, a run that once saw stale data would train at 80 % of its
learning rate for good.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

from async_rl_ros.core.config import DoctorConfig
from async_rl_ros.core.learning.doctor.interface import Knobs


#: The knobs a remedy may turn: the ``scale_*`` methods of :class:`Knobs`.
KNOB_NAMES = frozenset(name for name in vars(Knobs) if name.startswith('scale_'))


@dataclasses.dataclass
class Applied:
    """
    One remedy still in force.

    :param knob: the :class:`Knobs` method that was called.
    :param factor: the factor it was called with.
    """

    knob: str
    factor: float


@dataclasses.dataclass
class Undone:
    """
    One remedy the ledger just undid.

    :param detector: the detector whose remedy it was.
    :param remedy: what was called, with the knob's new value (``'scale_learning_rate(1.25)'``).
    :param quiet_for: learner updates since that detector's last detection.
    """

    detector: str
    remedy: str
    quiet_for: int


def _call(knobs: Knobs, knob: str, factor: float) -> str:
    """Turn a knob; return the call with its result, for the log."""
    result = getattr(knobs, knob)(factor)
    text = f'{knob}({factor:g})'
    if isinstance(result, (int, float)):
        text += f' -> {float(result):.4g}'
    return text


class RemedyLedger:
    """
    Apply remedies with a cooldown, remember them and undo them once their symptom is gone.

    :param knobs: what remedies turn; ``None``: nothing is ever applied.
    """

    def __init__(self, knobs: Knobs | None):
        self.knobs = knobs
        self.applied: dict[str, list[Applied]] = {}  #: per detector, oldest first
        self.applied_total = 0
        self.undone_total = 0
        self._last_detection: dict[str, int] = {}
        self._last_applied: dict[str, int] = {}
        self._last_change: dict[str, int] = {}  # last remedy applied or undone, per detector

    @property
    def in_force(self) -> int:
        """Return how many remedies are applied and not undone."""
        return sum(len(stack) for stack in self.applied.values())

    def treat(self, cfg: DoctorConfig, detector: str, knob: str, factor: float,
              step: int) -> tuple[str | None, str]:
        """
        Record a detection and apply its remedy, unless it is off, missing or cooling down.

        :param cfg: the doctor's current thresholds (``auto_remedy``, the cooldown).
        :param detector: the detector that fired.
        :param knob: the :class:`Knobs` method of its remedy.
        :param factor: the factor to call it with.
        :param step: the learner update counter.
        :returns: ``(remedy, note)``: the remedy applied (``None`` when none was) and what the
            log line should add about it.
        """
        self._last_detection[detector] = step
        if not cfg.auto_remedy:
            return None, f'; auto_remedy off, suggested remedy {knob}({factor:g})'
        if self.knobs is None or not hasattr(self.knobs, knob):
            return None, f'; remedy {knob}({factor:g}) unavailable: the learner has no such knob'
        last = self._last_applied.get(detector)
        if last is not None and step - last < cfg.remedy_cooldown_steps:
            return None, f'; remedy {knob} in cooldown since step {last}'
        remedy = _call(self.knobs, knob, factor)
        self.applied.setdefault(detector, []).append(Applied(knob, factor))
        self._last_applied[detector] = self._last_change[detector] = step
        self.applied_total += 1
        return remedy, f'; remedy: {remedy}'

    def recover(self, cfg: DoctorConfig, step: int) -> list[Undone]:
        """
        Undo the latest remedy of every detector quiet for ``remedy_recovery_steps`` updates.

        A detector is quiet when it has neither fired nor had a remedy applied or undone for
        that long; so a detector with three remedies in force needs three quiet intervals to
        be back where it started. ``remedy_recovery_steps = 0`` keeps every remedy for good.

        :param cfg: the doctor's current thresholds.
        :param step: the learner update counter.
        :returns: what was undone now (usually nothing).
        """
        window = cfg.remedy_recovery_steps
        if window <= 0 or self.knobs is None:
            return []
        undone = []
        for detector, stack in self.applied.items():
            if not stack:
                continue
            seen = self._last_detection.get(detector, 0)
            if step - max(seen, self._last_change.get(detector, 0)) < window:
                continue
            last = stack.pop()
            undone.append(Undone(detector, _call(self.knobs, last.knob, 1.0 / last.factor),
                                 step - seen))
            self._last_change[detector] = step
            self.undone_total += 1
        return undone

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Return the remedies in force and the steps their timing is measured from."""
        return {'applied': {d: [dataclasses.asdict(a) for a in stack]
                            for d, stack in self.applied.items()},
                'applied_total': self.applied_total, 'undone_total': self.undone_total,
                'last_detection': dict(self._last_detection),
                'last_applied': dict(self._last_applied),
                'last_change': dict(self._last_change)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """
        Restore a :meth:`state_dict`; the knobs themselves come back with the learner's state.

        :param state: a dict made by :meth:`state_dict`.
        :raises ValueError: naming the detector whose remedy has an unknown knob, or a factor
            that is not finite and > 0 (undoing it would divide by it).
        """
        applied = {d: [Applied(str(a['knob']), float(a['factor'])) for a in stack]
                   for d, stack in state['applied'].items()}
        for detector, stack in applied.items():
            for remedy in stack:
                if remedy.knob not in KNOB_NAMES:
                    raise ValueError(f'doctor remedy of {detector!r}: unknown knob '
                                     f'{remedy.knob!r} (allowed: {", ".join(sorted(KNOB_NAMES))})')
                if not (math.isfinite(remedy.factor) and remedy.factor > 0):
                    raise ValueError(f'doctor remedy of {detector!r}: factor {remedy.factor!r} '
                                     'must be finite and > 0')
        self.applied = applied
        self.applied_total = int(state['applied_total'])
        self.undone_total = int(state['undone_total'])
        self._last_detection = {d: int(s) for d, s in state['last_detection'].items()}
        self._last_applied = {d: int(s) for d, s in state['last_applied'].items()}
        self._last_change = {d: int(s) for d, s in state['last_change'].items()}
