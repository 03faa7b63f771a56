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
ROS 2 transport: transitions/s into the learner's ingest path, weight-broadcast latency.

Needs rclpy and the built ``async_rl_ros_interfaces`` (source the workspace first).

* Transitions: a worker-like process publishes ``TransitionBatch`` messages of 1, 64 and 256
  transitions as fast as it can (QoS ``TRANSITIONS``); this process runs the learner node's
  ingest path -- the subscription only puts messages into the
  :class:`~async_rl_ros.core.transport.double_buffer.DoubleBuffer`, whose thread converts them with
  ``msg_to_batch`` (dimension checks included) -- and counts the transitions that come out
  ready for ``Learner.ingest``.
* Weights: a shard-like process commits a drifting actor of the shipped size to a
  ``ShardReplica`` with the shipped codec and posts what it serves on the shard's two topics
  (``ShardOutlet``, as the ``param_server`` node does: a keyframe every ``full_every``
  packets, deltas on it; QoS ``WEIGHTS``) at 20 Hz with the send time in the header; this
  process stores the messages on boards and polls a ``WeightReceiver`` at once, as the
  ``env_worker`` node does (CRC, versions, keyframes), and records send-to-assembled latency.
  Both processes use the system clock.

DDS stays on loopback (``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``; ``ROS_LOCALHOST_ONLY=1`` on
Humble).
Usage: ``python bench/ros_transport.py [--quick]``; the last line is a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import time

import numpy as np

TOPIC_T = '/bench/transitions'
TOPIC_W = '/bench/weights'
TOPIC_K = '/bench/weights/keyframe'
#: The product's own topics (worker 0's transitions, shard 0's weights): an SROS2 policy knows
#: no others, so a run with security on uses these (:func:`use_product_topics`).
PRODUCT_TOPICS = ('/worker_0/transitions', '/weights/shard_0', '/weights/shard_0/keyframe')
MATCH_TIMEOUT_S = 15.0


def use_product_topics() -> None:
    """Publish and receive on :data:`PRODUCT_TOPICS` instead of the bench's own topics."""
    global TOPIC_T, TOPIC_W, TOPIC_K
    TOPIC_T, TOPIC_W, TOPIC_K = PRODUCT_TOPICS


def local_dds() -> None:
    """Keep DDS on this host (loopback) and on a domain of its own, unless told otherwise."""
    os.environ.setdefault('ROS_DOMAIN_ID', '63')
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    if os.environ.get('ROS_DISTRO') == 'humble':  # Jazzy warns that it is deprecated
        os.environ.setdefault('ROS_LOCALHOST_ONLY', '1')


def _wait_for_match(publisher, seconds: float = MATCH_TIMEOUT_S) -> bool:
    deadline = time.monotonic() + seconds
    while publisher.get_subscription_count() == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    return publisher.get_subscription_count() > 0


def _publish_transitions(batch_size: int, seconds: float) -> None:
    """Child process: publish one prepared batch over and over for ``seconds``."""
    import rclpy

    from async_rl_ros.ros import qos
    from async_rl_ros.ros.conversions import batch_to_msg
    from async_rl_ros_interfaces.msg import TransitionBatch

    rclpy.init()
    node = rclpy.create_node('bench_worker')
    pub = node.create_publisher(TransitionBatch, TOPIC_T, qos.TRANSITIONS)
    rng = np.random.default_rng(0)
    n = batch_size
    msg = batch_to_msg({'obs': rng.normal(size=(n, 21)), 'action': rng.uniform(-1, 1, (n, 6)),
                        'reward': rng.normal(size=n), 'next_obs': rng.normal(size=(n, 21)),
                        'terminated': np.zeros(n, bool), 'truncated': np.zeros(n, bool),
                        'policy_version': np.zeros(n, np.int64)}, worker_id=0)
    if _wait_for_match(pub):
        time.sleep(1.0)  # the subscriber may match this writer a moment after this one
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pub.publish(msg)
    node.destroy_node()
    rclpy.try_shutdown()


def _publish_weights(count: int, rate_hz: float) -> None:
    """Child process: publish ``count`` PolicyWeights of the actor at ``rate_hz``."""
    import rclpy

    from async_rl_ros.core.config import CodecConfig, LearnerConfig, ParameterServerConfig
    from async_rl_ros.core.learning.networks import Actor
    from async_rl_ros.core.records import PolicyState
    from async_rl_ros.core.weights.receiver import ShardOutlet
    from async_rl_ros.core.weights.sharded_weights import ShardedCommitter, ShardReplica
    from async_rl_ros.ros import qos
    from async_rl_ros.ros.conversions import shard_packet_to_msg
    from async_rl_ros.ros.node_utils import TopicBoard
    from async_rl_ros_interfaces.msg import PolicyWeights

    rclpy.init()
    node = rclpy.create_node('bench_shard')
    pub = node.create_publisher(PolicyWeights, TOPIC_W, qos.WEIGHTS)
    latest = TopicBoard(pub)  # the shard's topics as its boards, as in the param_server node
    keyframe = TopicBoard(node.create_publisher(PolicyWeights, TOPIC_K, qos.WEIGHTS))
    hidden = tuple(LearnerConfig().sac.hidden_sizes)
    actor = {k: v.numpy() for k, v in Actor(21, 6, hidden).state_dict().items()}
    extras = {'obs_mean': np.zeros(21, np.float32), 'obs_std': np.ones(21, np.float32),
              'obs_clip': np.float32(10.0)}
    cfg = ParameterServerConfig(num_shards=1, replicas=1)
    committer = ShardedCommitter(cfg, PolicyState.from_parts(actor, extras, 0))
    shard = ShardReplica(0, 1, CodecConfig())  # the shipped codec: keyframes and deltas
    shard.apply(committer.full(0))
    outlet = ShardOutlet(latest, keyframe, encode=lambda packet: shard_packet_to_msg(
        packet, stamp=node.get_clock().now().to_msg()))
    rng = np.random.default_rng(1)
    if _wait_for_match(pub):
        time.sleep(0.5)
        for _ in range(count):
            actor = {k: v + 1e-3 * rng.standard_normal(v.shape).astype(np.float32)
                     for k, v in actor.items()}
            shard.apply(committer.commit(PolicyState.from_parts(actor, extras, 0))[0])
            outlet.post(shard)
            time.sleep(1.0 / rate_hz)
        time.sleep(1.0)
    node.destroy_node()
    rclpy.try_shutdown()


def _spin_while(node, process, executor) -> None:
    while process.is_alive():
        executor.spin_once(timeout_sec=0.05)
    for _ in range(20):
        executor.spin_once(timeout_sec=0.01)


class IngestCounter:
    """
    The learner's ingest path on ``node``, counting the transitions that come out of it.

    Subscription -> DoubleBuffer -> ``msg_to_batch``: ready for ``Learner.ingest``.
    """

    def __init__(self, node):
        from async_rl_ros.core.transport.double_buffer import DoubleBuffer
        from async_rl_ros.ros import qos
        from async_rl_ros_interfaces.msg import TransitionBatch

        self.times: list[float] = []
        self.transitions = 0
        self.buffer = DoubleBuffer(self._preprocess, max_raw=4096)
        node.create_subscription(TransitionBatch, TOPIC_T, self.buffer.put, qos.TRANSITIONS)

    def _preprocess(self, msg):
        from async_rl_ros.ros.conversions import msg_to_batch

        batch = msg_to_batch(msg, 21, 6)
        self.transitions += len(batch['reward'])
        self.times.append(time.perf_counter())
        return batch

    def finish(self, batch_size: int) -> float:
        """Drain, close; return transitions/s between the first and the last batch."""
        self.buffer.drain(5.0)
        self.buffer.close()
        if len(self.times) < 2:
            return 0.0
        return (self.transitions - batch_size) / (self.times[-1] - self.times[0])


class WeightsReceiver:
    """
    A worker's weight path on ``node``, recording send-to-arrival and -assembled latency (ms).

    The shard's two topics are stored on boards, as the ``env_worker`` node does, and its
    ``WeightReceiver`` is polled at once on every packet.
    """

    def __init__(self, node):
        from async_rl_ros.core.weights.receiver import MemoryBoard, WeightReceiver
        from async_rl_ros.ros import qos
        from async_rl_ros.ros.conversions import msg_to_shard_packet
        from async_rl_ros_interfaces.msg import PolicyWeights

        self.node = node
        self.latest, self.keyframe = MemoryBoard(), MemoryBoard()
        self.receiver = WeightReceiver([(self.latest.view(), self.keyframe.view())],
                                       parse=msg_to_shard_packet)
        self.arrival: list[float] = []
        self.assembled: list[float] = []
        self._sent: dict[int, float] = {}  # send time of each version
        node.create_subscription(PolicyWeights, TOPIC_W, self._on_weights, qos.WEIGHTS)
        node.create_subscription(PolicyWeights, TOPIC_K, self._on_keyframe, qos.WEIGHTS)

    def _stamp(self, msg) -> None:
        self._sent[int(msg.version)] = msg.header.stamp.sec * 1e9 + msg.header.stamp.nanosec

    def _on_weights(self, msg) -> None:
        self._stamp(msg)
        now = self.node.get_clock().now().nanoseconds
        self.arrival.append((now - self._sent[int(msg.version)]) / 1e6)
        self.latest.publish(msg, msg.version)
        self._poll()

    def _on_keyframe(self, msg) -> None:
        self._stamp(msg)
        self.keyframe.publish(msg, msg.version)
        self._poll()  # a delta may have been waiting for it

    def _poll(self) -> None:
        state = self.receiver.poll()  # the worker's next poll, at once
        if state is not None:
            now = self.node.get_clock().now().nanoseconds
            self.assembled.append((now - self._sent[state.version]) / 1e6)


def bench_transitions(batch_size: int, seconds: float) -> float:
    """Return transitions/s that came out of the learner's ingest path."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    node = rclpy.create_node('bench_learner')
    ingest = IngestCounter(node)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    process = mp.get_context('spawn').Process(target=_publish_transitions,
                                              args=(batch_size, seconds))
    process.start()
    _spin_while(node, process, executor)
    rate = ingest.finish(batch_size)
    executor.remove_node(node)
    node.destroy_node()
    return rate


def bench_weights(count: int, rate_hz: float) -> tuple[list[float], list[float], int]:
    """Return arrival and assembled latencies (ms) and the number of weights assembled."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    node = rclpy.create_node('bench_worker_weights')
    weights = WeightsReceiver(node)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    process = mp.get_context('spawn').Process(target=_publish_weights, args=(count, rate_hz))
    process.start()
    _spin_while(node, process, executor)
    executor.remove_node(node)
    node.destroy_node()
    return (weights.arrival, weights.assembled, len(weights.assembled),
            weights.receiver.stats())


def main() -> None:
    """Run the benchmark and print a table and a JSON summary."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    parser.add_argument('--quick', action='store_true', help='short runs (< 1 min)')
    args = parser.parse_args()
    local_dds()  # before rclpy starts, and inherited by the publishing processes
    try:
        import rclpy
        import async_rl_ros_interfaces.msg  # noqa: F401 -- the built messages are needed
    except ImportError as exc:
        print(f'skipped: ROS 2 is not available ({exc}); source a ROS 2 workspace with '
              'async_rl_ros_interfaces built')
        print(json.dumps({'transitions_per_s_b64': None, 'transitions_per_s_b256': None,
                          'weights_p50_ms': None, 'weights_p99_ms': None,
                          'distro': os.environ.get('ROS_DISTRO'),
                          'skipped': 'rclpy not available'}))
        return
    seconds = 3.0 if args.quick else 10.0
    count = 60 if args.quick else 400
    rclpy.init()
    try:
        rates = {b: bench_transitions(b, seconds) for b in (1, 64, 256)}
        arrival, assembled, n, received = bench_weights(count, 20.0)
    finally:
        rclpy.try_shutdown()
    p = {q: float(np.percentile(assembled, q)) if assembled else float('nan')
         for q in (50, 99)}
    print(f'{"batch":>6} | {"transitions/s":>14}')
    for b, rate in rates.items():
        print(f'{b:>6} | {rate:>14,.0f}')
    print(f'weights: {n}/{count} assembled; send->arrival p50 '
          f'{np.percentile(arrival, 50) if arrival else float("nan"):.2f} ms, '
          f'send->assembled p50 {p[50]:.2f} ms, p99 {p[99]:.2f} ms')
    print(f'weights: {received["weights/full_packets"]} keyframes and '
          f'{received["weights/delta_packets"]} deltas read, '
          f'{received["weights/bytes_received"] / max(n, 1):,.0f} bytes per policy')
    print(json.dumps({'transitions_per_s_b1': round(rates[1]),
                      'transitions_per_s_b64': round(rates[64]),
                      'transitions_per_s_b256': round(rates[256]),
                      'weights_p50_ms': round(p[50], 3), 'weights_p99_ms': round(p[99], 3),
                      'distro': os.environ.get('ROS_DISTRO', 'unknown')}))


if __name__ == '__main__':
    main()
