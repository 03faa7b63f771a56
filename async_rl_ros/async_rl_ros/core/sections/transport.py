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
Sections of the weight path and the transports between workers and learner.

The weight codec and the sharded parameter server, and the two runners that carry transitions
and weights: the no-ROS ``local_runner`` and the ROS 2 ``ros_transport``. Import them from
:mod:`async_rl_ros.core.config`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from async_rl_ros.core.options import ConfigError, INT32_MAX, option, Section


def _max_batch_lag(read_only: bool = False) -> Any:
    """Declare ``max_batch_lag``, the same option in both transports."""
    return option(8, 'A worker sends a partly filled batch once its policy is this many '
                  'versions newer than the first transition of the batch, also while the rate '
                  'limit holds it back: batching then adds at most this lag when the learner '
                  'publishes faster than a worker fills a batch (0: full batches only).',
                  unit='versions', low=0, high=1_000_000, read_only=read_only)


@dataclasses.dataclass
class CodecConfig(Section):
    """Compression of the policy weights sent from the learner to the workers."""

    quantize: bool = option(True, 'Quantize the weights (int8 deltas, keyframes of '
                            'keyframe_bits); when false they travel as raw float32 (the '
                            'uncompressed reference).', read_only=True)
    per_channel: bool = option(True, 'One scale and zero point per output row of every tensor '
                               'with two or more dimensions; when false one per tensor.',
                               read_only=True)
    entropy_coding: str = option('zlib', 'Lossless coding of the int8 codes (a tensor keeps '
                                 'the raw codes when zlib does not make them smaller).',
                                 choices=('none', 'zlib'), read_only=True)
    zlib_level: int = option(6, 'zlib compression level (1: fastest, 9: smallest).',
                             low=1, high=9, read_only=True)
    delta: bool = option(True, 'Between keyframes send int8 deltas on the last keyframe (a '
                         'full packet): a worker that missed packets still applies the next '
                         'one; when false every packet is full.', read_only=True)
    keyframe_bits: int = option(12, 'Bits per weight of a keyframe: 8 (int8 affine codes) or '
                                '9 to 16 (symmetric codes sent as int16): the precision a '
                                'worker acts with until the next delta refines it.',
                                unit='bits', low=8, high=16, read_only=True)
    delta_refine: int = option(8, 'A delta row is quantized on the step of an int8 full packet '
                               'of the row divided by delta_refine (or on its own range over '
                               '254 steps when that is wider): 1 sends the fewest bytes, '
                               'larger values send finer corrections.',
                               low=1, high=256, read_only=True)
    full_every: int = option(10, 'Every full_every-th packet is a keyframe, the base of the '
                             'deltas that follow (1: always full).',
                             unit='packets', low=1, high=10**9, read_only=True)


@dataclasses.dataclass
class ParameterServerConfig(Section):
    """Sharded parameter server and delayed commits (parameters ``parameter_server.*``)."""

    num_shards: int = option(2, 'Parameter-server shards started at launch.', low=1, high=1024,
                             read_only=True)
    replicas: int = option(2, 'Shards that hold a copy of each partition (the primary and the '
                           'next distinct shards clockwise on the hash ring).', low=1, high=16,
                           read_only=True)
    virtual_nodes: int = option(128, 'Points each shard occupies on the consistent-hash ring; '
                                'the relative spread of the shard loads is about '
                                '1/sqrt(virtual_nodes).', low=1, high=65536, read_only=True)
    chunk_size: int = option(16384, 'Floats per partition: tensors are cut into chunks of this '
                             'size, so a big layer spreads over several shards.', unit='floats',
                             low=1, high=INT32_MAX, read_only=True)
    commit_every: int = option(8, 'Optimizer steps between two commits of the accumulated '
                               'parameter change (delayed update; 1 commits every step); '
                               'lockstep training (sync) commits once a round instead.',
                               unit='updates', low=1, high=10**6, read_only=True)

    def check(self, source: str | None, prefix: str) -> None:
        """Check that there are enough shards for the replicas."""
        if self.replicas > self.num_shards:
            raise ConfigError(prefix + 'replicas', self.replicas,
                              f'<= num_shards = {self.num_shards}', source)


@dataclasses.dataclass
class LocalRunnerConfig(Section):
    """The no-ROS runner's processes and transport (section ``local_runner``)."""

    mode: str = option('async', 'async: worker processes never wait for the learner; sync: '
                       'the same in lockstep rounds (the baseline); single: the learner steps '
                       'one environment itself (the reference SAC loop).',
                       choices=('async', 'sync', 'single'))
    num_workers: int = option(0, 'Env worker processes (0: physical cores - 1, at least 1); '
                              'more than free memory holds are refused at start.',
                              low=0, high=1024)
    transition_batch: int = option(64, 'Transitions per message from a worker.',
                                   unit='transitions', low=1, high=65536)
    max_batch_lag: int = _max_batch_lag()
    queue_batches: int = option(256, 'Messages the transition queues hold, split between the '
                                'workers (one queue each), before a worker drops batches '
                                '(workers never wait).', low=1, high=1_000_000)
    stats_interval_s: float = option(2.0, 'Seconds between metric reports.', unit='s',
                                     low=0.1, high=3600.0)
    parameter_server: ParameterServerConfig = dataclasses.field(
        default_factory=ParameterServerConfig)
    codec: CodecConfig = dataclasses.field(default_factory=CodecConfig)


@dataclasses.dataclass
class RosTransportConfig(Section):
    """The ROS 2 nodes' transport (section ``ros_transport``; read by ``train.launch.py``)."""

    transition_batch: int = option(64, 'Transitions per TransitionBatch message from a worker.',
                                   unit='transitions', low=1, high=65536, read_only=True)
    max_batch_lag: int = _max_batch_lag(read_only=True)
    max_raw_batches: int = option(1024, 'Received batches queued for preprocessing before the '
                                  'oldest is dropped (subscriptions never block).', low=1,
                                  high=1_000_000, read_only=True)
    metrics_hz: float = option(2.0, 'Rate of the scalar metric topics and TrainingStats.',
                               unit='Hz', low=0.01, high=100.0, read_only=True)
    diagnostics_hz: float = option(1.0, 'Rate of the DiagnosticArray on /diagnostics and of the '
                                   'worker and shard status messages.', unit='Hz', low=0.01,
                                   high=100.0, read_only=True)
    worker_timeout_s: float = option(5.0, 'A worker silent for longer is reported stale.',
                                     unit='s', low=0.1, high=3600.0)
    warm_start_bag: str = option('', 'rosbag2 recording (ros2 bag record) of TransitionBatch '
                                 'topics the learner loads into its replay buffer at start; '
                                 'its transitions are no env steps of this run, and a '
                                 'recording it cannot use stops it (empty: none).',
                                 read_only=True)
    parameter_server: ParameterServerConfig = dataclasses.field(
        default_factory=ParameterServerConfig)
    codec: CodecConfig = dataclasses.field(default_factory=CodecConfig)
