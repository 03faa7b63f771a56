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


"""What the training doctor exchanges: its events, its divergence error, the learner's knobs."""

from __future__ import annotations

import dataclasses
from typing import Protocol


@dataclasses.dataclass
class DoctorEvent:
    """
    One detection that was logged.

    :param detector: name of the detector (``non_finite``, ``exploration`` ...).
    :param reason: what was measured, in words.
    :param value: the measured value.
    :param threshold: the threshold it was compared with.
    :param remedy: the remedy applied (``'scale_temperature(1.1) -> 0.22'``), or ``None``.
    :param step: learner update at which it happened.
    """

    detector: str
    reason: str
    value: float
    threshold: float
    remedy: str | None = None
    step: int = 0


class TrainingDiverged(RuntimeError):
    """More than ``max_consecutive_skips`` consecutive steps were skipped for NaN/Inf."""


class Knobs(Protocol):
    """
    What the learner lets the doctor turn; implementations clamp to their own sane bounds.

    A learner without some knob may leave the method out: the doctor then logs that the remedy
    is unavailable. Each method returns the new value (for the log) or ``None``. The doctor
    undoes a remedy by calling the same knob with ``1 / factor``, so that call must bring the
    knob back to where the remedy found it.
    """

    def scale_learning_rate(self, factor: float) -> float | None:
        """
        Multiply the learning rates of all optimizers by ``factor``.

        :param factor: multiplier (< 1 lowers the rates).
        :returns: the new (actor) learning rate, or ``None``.
        """

    def scale_temperature(self, factor: float) -> float | None:
        """
        Multiply the entropy temperature alpha by ``factor`` (raise exploration when > 1).

        With a learned temperature, add ``log(factor)`` to ``log_alpha``.

        :param factor: multiplier.
        :returns: the new temperature, or ``None``.
        """

    def scale_policy_regularization(self, factor: float) -> float | None:
        """
        Multiply the weight of the policy regularization (e.g. a KL/behaviour term) by ``factor``.

        :param factor: multiplier (> 1 keeps the policy closer to the workers' versions).
        :returns: the new weight, or ``None``.
        """
