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
The named QoS profiles of every topic (one place, so publishers and subscribers agree).

======================  ========================================  ==============================
profile                 policy                                    used by
======================  ========================================  ==============================
``TRANSITIONS``         reliable, volatile, keep last 64          ``transitions`` (workers ->
                                                                  learner)
``WEIGHTS``             reliable, transient local, keep last 1    ``weights/shard_<i>``: a late
                                                                  joiner gets the newest version
``COMMITS``             reliable, volatile, keep last 16          ``commits/shard_<i>``
``STATUS``              reliable, volatile, keep last 10          worker / shard status
``METRICS``             reliable, volatile, keep last 10          ``learner/metrics/...``,
                                                                  ``learner/stats``
``DIAGNOSTICS``         reliable, volatile, keep last 10          ``/diagnostics``
``OBJECT_POSE``         best effort, volatile, keep last 1        ``cell.pose_topic`` (a camera
                                                                  -> a physical cube cell)
======================  ========================================  ==============================
"""

from __future__ import annotations

from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

__all__ = ['TRANSITIONS', 'WEIGHTS', 'COMMITS', 'STATUS', 'METRICS', 'DIAGNOSTICS',
           'OBJECT_POSE', 'PROFILES']


def _profile(depth: int, durability: DurabilityPolicy = DurabilityPolicy.VOLATILE
             ) -> QoSProfile:
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=depth,
                      reliability=ReliabilityPolicy.RELIABLE, durability=durability)


#: Transition batches: reliable (the learner counts what it loses), deep enough for bursts.
TRANSITIONS = _profile(64)
#: Policy weights: the newest version only, kept for subscribers that join later.
WEIGHTS = _profile(1, DurabilityPolicy.TRANSIENT_LOCAL)
#: Learner -> shard commits: a lost one makes the shard ask for a full re-sync.
COMMITS = _profile(16)
#: Worker and shard status.
STATUS = _profile(10)
#: Scalar metrics for rqt_plot and the TrainingStats message.
METRICS = _profile(10)
#: ``diagnostic_msgs/DiagnosticArray`` on ``/diagnostics`` (what rqt_robot_monitor reads).
DIAGNOSTICS = _profile(10)

#: The cube pose from a camera: only the newest matters, and a best-effort subscriber hears
#: reliable and best-effort publishers alike (a camera driver's sensor-data QoS).
OBJECT_POSE = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1,
                         reliability=ReliabilityPolicy.BEST_EFFORT,
                         durability=DurabilityPolicy.VOLATILE)

PROFILES = {'TRANSITIONS': TRANSITIONS, 'WEIGHTS': WEIGHTS, 'COMMITS': COMMITS,
            'STATUS': STATUS, 'METRICS': METRICS, 'DIAGNOSTICS': DIAGNOSTICS,
            'OBJECT_POSE': OBJECT_POSE}
