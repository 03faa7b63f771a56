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
The newest pose of the object a task moves, as it arrives from outside the arm.

On a physical cell the cube is seen by a camera (AprilTags) or a motion-capture system; a
transport hands each reading to :meth:`PoseBoard.offer` from any thread (the ROS env worker
from its ``geometry_msgs/PoseStamped`` subscription, ``cell.pose_topic``), and the real cell
reads :meth:`PoseBoard.latest` every step. A reading is checked before it is kept: its
frame (``cell.pose_frame``; no transform is applied), finite values, a unit quaternion, a
position inside the cell, a stamp neither in the future nor older than the newest kept one.
A refused reading is counted by its reason, never dropped silently. Velocities are finite
differences of the two newest kept readings.

:meth:`PoseBoard.reason` says why the policy may not act on the pose (none yet, or older than
``cell.pose_max_age_s``): the arm's policy gate holds the arm still while it does.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import threading
import time
from typing import Callable, Sequence

from async_rl_ros.core.config import EnvWorkerConfig
import numpy as np
import transforms3d

__all__ = ['ObjectPose', 'PoseBoard', 'REFUSALS']

#: Why a reading is refused (the keys of :attr:`PoseBoard.refused`).
REFUSALS = ('frame', 'non-finite', 'quaternion', 'outside the cell', 'future stamp',
            'out of order')
_CELL_SLACK = 0.25   # m: the cell is the safety box and this much around it
_CLOCK_SKEW = 0.05   # s: a stamp this far ahead of our clock is still accepted
_QUAT_TOL = 0.05     # |norm - 1| a quaternion may show (float32 senders)


@dataclasses.dataclass(frozen=True)
class ObjectPose:
    """One kept reading of the object, base frame."""

    position: np.ndarray   #: centre (m)
    quat: np.ndarray       #: orientation, unit quaternion (x, y, z, w) as ROS sends it
    stamp: float           #: when it was seen (s, the source's clock)
    velocity: np.ndarray   #: linear velocity (m/s) from the previous reading; 0 for the first
    spin: np.ndarray       #: angular velocity (rad/s) from the previous reading; 0 for the first


class PoseBoard:
    """
    The newest checked object pose; fed from any thread, read by the control loop.

    :param topic: where the readings come from (named in reasons).
    :param frame: the frame every reading must be in.
    :param max_age_s: oldest reading the policy may act on (s).
    :param low: lower corner of the region a reading may lie in (m, base frame).
    :param high: upper corner of that region.
    :param clock: the clock stamps are compared with (s): the transport's (ROS time).
    """

    def __init__(self, topic: str, frame: str, max_age_s: float, low: Sequence[float],
                 high: Sequence[float], clock: Callable[[], float] = time.time):
        self.topic = topic
        self.frame = frame
        self.max_age_s = float(max_age_s)
        self.low = np.asarray(low, dtype=np.float64)
        self.high = np.asarray(high, dtype=np.float64)
        self.clock = clock
        self.received = 0                    #: readings offered
        #: refused readings by reason (:data:`REFUSALS`)
        self.refused: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()
        self._newest: ObjectPose | None = None

    @classmethod
    def from_config(cls, cfg: EnvWorkerConfig, clock: Callable[[], float] = time.time
                    ) -> 'PoseBoard':
        """Build the board of ``cell.*``; the cell is the safety box widened by 25 cm."""
        box = cfg.safety
        return cls(cfg.cell.pose_topic, cfg.cell.pose_frame, cfg.cell.pose_max_age_s,
                   [v - _CELL_SLACK for v in box.workspace_low],
                   [v + _CELL_SLACK for v in box.workspace_high], clock)

    def offer(self, frame: str, position: Sequence[float], quat: Sequence[float],
              stamp: float) -> str | None:
        """
        Check a reading and keep it if it passes (thread-safe).

        :param frame: its ``header.frame_id``.
        :param position: (x, y, z) in m.
        :param quat: (x, y, z, w).
        :param stamp: when it was seen (s, on :attr:`clock`'s time base).
        :returns: ``None`` when kept, else the reason it was refused (also counted).
        """
        reason = self._refusal(frame, position, quat, stamp)
        with self._lock:
            self.received += 1
            if reason is None and self._newest is not None and stamp <= self._newest.stamp:
                reason = 'out of order'
            if reason is not None:
                self.refused[reason] += 1
                return reason
            self._newest = self._next(np.asarray(position, dtype=np.float64),
                                      np.asarray(quat, dtype=np.float64), float(stamp))
        return None

    def latest(self) -> ObjectPose | None:
        """Return the newest kept reading (``None`` before the first)."""
        with self._lock:
            return self._newest

    def age(self) -> float:
        """Return how old (s) the newest kept reading is; infinite before the first."""
        newest = self.latest()
        return math.inf if newest is None else max(0.0, self.clock() - newest.stamp)

    def reason(self) -> str | None:
        """Return why the policy may not act on the pose now, or ``None``."""
        age = self.age()
        if math.isinf(age):
            return f'no object pose yet on {self.topic}'
        if age > self.max_age_s:
            return (f'the object pose on {self.topic} is {age:.2f} s old (limit '
                    f'{self.max_age_s:g} s)')
        return None

    def summary(self) -> dict[str, object]:
        """Return the counts a run summary reports: readings received and refused by reason."""
        with self._lock:
            return {'received': self.received, 'refused': dict(self.refused)}

    def _refusal(self, frame: str, position: Sequence[float], quat: Sequence[float],
                 stamp: float) -> str | None:
        if frame != self.frame:
            return 'frame'
        values = [*position, *quat, stamp]
        if len(values) != 8 or not all(math.isfinite(float(v)) for v in values):
            return 'non-finite'
        if abs(math.sqrt(sum(float(v) ** 2 for v in quat)) - 1.0) > _QUAT_TOL:
            return 'quaternion'
        p = np.asarray(position, dtype=np.float64)
        if np.any(p < self.low) or np.any(p > self.high):
            return 'outside the cell'
        if stamp > self.clock() + _CLOCK_SKEW:
            return 'future stamp'
        return None

    def _next(self, position: np.ndarray, quat: np.ndarray, stamp: float) -> ObjectPose:
        """Return the reading to keep, its velocities differenced against the previous one."""
        quat = quat / np.linalg.norm(quat)
        velocity, spin = np.zeros(3), np.zeros(3)
        prev = self._newest
        if prev is not None:
            dt = stamp - prev.stamp
            velocity = (position - prev.position) / dt
            # rotation from the previous orientation to this one, as axis * angle / dt
            now = transforms3d.quaternions.qmult(_wxyz(quat),
                                                 transforms3d.quaternions.qinverse(
                                                     _wxyz(prev.quat)))
            axis, angle = transforms3d.quaternions.quat2axangle(now)
            if angle > math.pi:
                angle -= 2.0 * math.pi
            spin = np.asarray(axis) * angle / dt
        return ObjectPose(position, quat, stamp, velocity, spin)


def _wxyz(quat: np.ndarray) -> np.ndarray:
    return np.array([quat[3], quat[0], quat[1], quat[2]])
