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
Count-aware prioritized replay: ring storage, segment trees, sampler and a thread-safe facade.

Three small parts, each with ``state_dict()`` / ``load_state_dict()``:

* :class:`ReplayStorage` (:mod:`.storage`) -- a fixed-capacity ring of preallocated numpy
  arrays. Every transition carries the ``policy_version`` that produced it and the
  ``worker_id`` of the environment worker that collected it.
* :class:`CountAwarePrioritizedSampler` (:mod:`.sampler`) -- priorities, sampling, importance
  weights and staleness (the formulas are in the docstring of :mod:`.sampler`), kept at
  O(log n) by a :class:`SumTree` and a :class:`MinTree` (:mod:`.segment_tree`).
* :class:`ReplayBuffer` (:mod:`.buffer`) -- owns one of each, guards them with a single lock
  (actors' data is ingested on one thread while the learner samples on another) and gathers
  the batches.

The public names of the submodules are re-exported here.
"""

from async_rl_ros.core.config import ReplayConfig
from async_rl_ros.core.learning.replay.buffer import ReplayBuffer
from async_rl_ros.core.learning.replay.sampler import CountAwarePrioritizedSampler
from async_rl_ros.core.learning.replay.segment_tree import MinTree, SumTree
from async_rl_ros.core.learning.replay.storage import ReplayStorage

__all__ = [
    'ReplayConfig',
    'SumTree',
    'MinTree',
    'ReplayStorage',
    'CountAwarePrioritizedSampler',
    'ReplayBuffer',
]
