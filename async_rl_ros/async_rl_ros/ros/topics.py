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

"""Topic names of the ROS 2 layer (absolute unless a worker's namespace applies)."""

from __future__ import annotations

import re

__all__ = ['TRANSITIONS', 'WEIGHTS', 'COMMITS', 'SHARD_STATUS', 'WORKER_STATUS',
           'TRAINING_STATS', 'METRICS_PREFIX', 'DIAGNOSTICS', 'POLICY_RUNNER_STATUS',
           'KEYFRAMES', 'weights_topic', 'keyframe_topic', 'commits_topic', 'metric_topic']

#: Relative: ``/<worker namespace>/transitions`` (TransitionBatch), one per worker.
TRANSITIONS = 'transitions'
WEIGHTS = '/weights/shard_{}'
#: The keyframe (full packet) the newest packet on ``WEIGHTS`` is a delta on.
KEYFRAMES = '/weights/shard_{}/keyframe'
COMMITS = '/commits/shard_{}'
SHARD_STATUS = '/parameter_server/status'
WORKER_STATUS = '/workers/status'
TRAINING_STATS = '/learner/stats'
METRICS_PREFIX = '/learner/metrics/'
DIAGNOSTICS = '/diagnostics'
POLICY_RUNNER_STATUS = 'policy_runner/status'
_BAD = re.compile(r'[^A-Za-z0-9_/]')


def weights_topic(shard_id: int) -> str:
    """Return the PolicyWeights topic of a shard."""
    return WEIGHTS.format(int(shard_id))


def keyframe_topic(shard_id: int) -> str:
    """Return the topic of a shard's keyframe (PolicyWeights, a full packet)."""
    return KEYFRAMES.format(int(shard_id))


def commits_topic(shard_id: int) -> str:
    """Return the WeightsCommit topic of a shard."""
    return COMMITS.format(int(shard_id))


def metric_topic(name: str) -> str:
    """Return the std_msgs/Float32 topic of a metric (``charts/episodic_return`` -> ...)."""
    parts = [p for p in _BAD.sub('_', name).split('/') if p]
    return METRICS_PREFIX + '/'.join(('m' + p) if p[0].isdigit() else p for p in parts)
