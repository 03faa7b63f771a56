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
``param_server`` node: one shard of the parameter server.

Applies the learner's commits (``/commits/shard_<i>``, WeightsCommit) to a
:class:`~async_rl_ros.core.weights.sharded_weights.ShardReplica` and publishes the shard's
partitions as a quantized PolicyWeights on ``/weights/shard_<i>``: a keyframe (full packet) every
``codec.full_every`` packets, int8 deltas on it in between. The keyframe itself is also on
``/weights/shard_<i>/keyframe``. Both are reliable, transient local, depth 1, so a worker that
starts (or restarts) late, or missed the keyframe, gets it at once and applies the next delta.
A commit that cannot apply (bad CRC, a missed commit) is counted and refused; the shard then
says ``needs_full`` in its ShardStatus and the learner re-sends its partitions whole.
"""

from __future__ import annotations

import collections

from async_rl_ros.core.config import RosTransportConfig
from async_rl_ros.core.weights.codec import CodecError
from async_rl_ros.core.weights.receiver import ShardOutlet
from async_rl_ros.core.weights.sharded_weights import ShardReplica
from async_rl_ros.ros import qos, topics
from async_rl_ros.ros.conversions import msg_to_shard_packet, shard_packet_to_msg
from async_rl_ros.ros.node_utils import run_node, TopicBoard
from async_rl_ros.ros.params import SectionParameters
from async_rl_ros_interfaces.msg import PolicyWeights, ShardStatus, WeightsCommit
from rcl_interfaces.msg import IntegerRange, ParameterDescriptor
from rclpy.node import Node

__all__ = ['ParamServerNode', 'main']


class ParamServerNode(Node):
    """One parameter-server shard (parameters ``shard_id`` and ``transport.*``)."""

    def __init__(self, **kwargs):
        super().__init__('param_server', **kwargs)
        # read once at start: every transport parameter is read-only here
        self.transport = SectionParameters(self, RosTransportConfig, 'transport.',
                                           frozen=True).section
        num_shards = self.transport.parameter_server.num_shards
        self.shard_id = self.declare_parameter(
            'shard_id', 0, ParameterDescriptor(
                description='Index of this shard (0 .. transport.parameter_server.num_shards '
                '- 1).', read_only=True,
                integer_range=[IntegerRange(from_value=0, to_value=num_shards - 1, step=1)])
        ).value
        self.replica = ShardReplica(self.shard_id, num_shards, self.transport.codec)
        self.needs_full = True
        self.rejected = collections.Counter()
        # The shard's two boards are its topics: the newest packet and its keyframe.
        self.outlet = ShardOutlet(
            TopicBoard(self.create_publisher(PolicyWeights, topics.weights_topic(self.shard_id),
                                             qos.WEIGHTS)),
            TopicBoard(self.create_publisher(PolicyWeights,
                                             topics.keyframe_topic(self.shard_id), qos.WEIGHTS)),
            encode=lambda packet: shard_packet_to_msg(packet, 'PolicyWeights',
                                                      stamp=self.get_clock().now().to_msg()))
        self.status_pub = self.create_publisher(ShardStatus, topics.SHARD_STATUS, qos.STATUS)
        self.create_subscription(WeightsCommit, topics.commits_topic(self.shard_id),
                                 self._on_commit, qos.COMMITS)
        self.create_timer(1.0 / self.transport.diagnostics_hz, self._publish_status)
        self.get_logger().info(f'shard {self.shard_id} of {num_shards} waiting for commits')

    def _on_commit(self, msg: WeightsCommit) -> None:
        try:
            self.replica.apply(msg_to_shard_packet(msg))
        except CodecError as exc:
            self.rejected[exc.reason] += 1
            if exc.reason in ('base_version', 'version') or self.replica.version < 0:
                self.needs_full = True
            self.get_logger().warning(f'commit refused ({exc}); '
                                      f'{sum(self.rejected.values())} so far',
                                      throttle_duration_sec=5.0)
            self._publish_status()
            return
        if msg.base_version < 0:
            self.needs_full = False
        self.outlet.post(self.replica)

    def _publish_status(self) -> None:
        stats = self.replica.stats()
        msg = ShardStatus()
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.shard_id = self.shard_id
        msg.version = int(stats['version'])
        msg.partitions = int(stats['partitions'])
        msg.needs_full = bool(self.needs_full)
        msg.commits_applied = int(stats['applied'])
        msg.commits_rejected = int(sum(self.rejected.values()))
        self.status_pub.publish(msg)


def main(args: list[str] | None = None) -> int:
    """Run one parameter-server shard."""
    return run_node(ParamServerNode, args)


if __name__ == '__main__':
    raise SystemExit(main())
