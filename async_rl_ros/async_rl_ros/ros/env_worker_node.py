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
``env_worker`` node: a lifecycle node that steps one environment and publishes transitions.

Lifecycle (:class:`~async_rl_ros.ros.arm_node.ArmNode`): *configure* builds the worker from
the ``env_worker`` parameters (:func:`~async_rl_ros.envs.factory.build_worker`, as the
local runner does; ``task.name`` picks the task, ``backend`` the simulated or the real arm,
which connects here);
*activate* starts the :class:`~async_rl_ros.core.workers.runtime.WorkerRuntime` thread;
*deactivate* stops it and stops the arm; *cleanup* and *shutdown* release the environment.
Every command passes the environment's safety filter.

The executor never waits on the environment: weight messages are only stored by their
callbacks on per-shard boards (the newest packet and the keyframe it is based on), and the
stepping thread installs them between two steps through the
:class:`~async_rl_ros.core.weights.receiver.WeightReceiver` every runner's workers use (CRCs,
versions, shapes; a keyframe fetched once when a delta's base is missing). Batches go out
on ``transitions`` (relative: the worker's namespace).

A cube task on a physical arm subscribes to ``cell.pose_topic`` (``geometry_msgs/PoseStamped``
from a camera or motion capture, :meth:`ArmNode.object_pose`): a stale pose holds the arm.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from async_rl_ros.core.config import EnvWorkerConfig, LearnerConfig, RosTransportConfig
from async_rl_ros.core.records import PolicyState, TransitionBatch as Batch
from async_rl_ros.core.weights.receiver import Expectation, MemoryBoard, WeightReceiver
from async_rl_ros.core.workers.runtime import WorkerRuntime
from async_rl_ros.envs.factory import build_worker, check_config
from async_rl_ros.ros import qos, topics
from async_rl_ros.ros.arm_node import ArmNode
from async_rl_ros.ros.conversions import batch_to_msg, msg_to_shard_packet
from async_rl_ros.ros.node_utils import LoggingAdapter, run_node
from async_rl_ros.ros.params import declare_task, SectionParameters
from async_rl_ros_interfaces.msg import PolicyWeights, TrainingStats, TransitionBatch, WorkerStatus
import numpy as np
from rcl_interfaces.msg import IntegerRange, ParameterDescriptor

__all__ = ['EnvWorkerNode', 'main']


class EnvWorkerNode(ArmNode):
    """One env worker (parameters: ``env_worker`` section, ``transport.*``, identity)."""

    def __init__(self, **kwargs):
        super().__init__('env_worker', **kwargs)
        defaults = declare_task(self)  # the task's own, under the parameter file
        self.cfg = SectionParameters(self, EnvWorkerConfig, on_change=self.on_env_config,
                                     check=check_config,
                                     defaults=defaults.get('env_worker')).section
        self.transport = SectionParameters(self, RosTransportConfig, 'transport.',
                                           frozen=True).section
        self.worker_id = self.declare_parameter(
            'worker_id', 0, ParameterDescriptor(
                description='Id stamped on every transition of this worker.', read_only=True,
                integer_range=[IntegerRange(from_value=0, to_value=2**31 - 1, step=1)])).value
        self.hidden = tuple(self.declare_parameter(
            'hidden_sizes', list(LearnerConfig().replace(**defaults.get('learner', {}))
                                 .sac.hidden_sizes), ParameterDescriptor(
                description="Hidden layer widths of the learner's actor (learner "
                'sac.hidden_sizes).', read_only=True)).value)
        self.source = 'sim' if self.cfg.backend == 'sim' else 'real'
        self.runtime: WorkerRuntime | None = None
        self.boards = [(MemoryBoard(), MemoryBoard())
                       for _ in range(self.transport.parameter_server.num_shards)]
        self.receiver: WeightReceiver | None = None
        self._episodes: list[dict[str, float]] = []
        self._episodes_lock = threading.Lock()
        self._last_status = (time.monotonic(), 0)

    # ------------------------------------------------------------------ lifecycle hooks
    def build(self) -> bool:
        """Build (connect) the environment, the worker and the topics."""
        try:
            built = build_worker(self.cfg, self.worker_id, self.hidden,
                                 self.transport.transition_batch,
                                 object_pose=self.object_pose(self.cfg),
                                 max_batch_lag=self.transport.max_batch_lag)
        except Exception as exc:  # noqa: B902 -- a backend that cannot connect: report it
            self.get_logger().error(f'cannot build the {self.cfg.backend} environment: {exc}')
            return False
        self.env = built.env
        expect = Expectation.of_policy(built.worker.policy, num_shards=len(self.boards))
        self.receiver = WeightReceiver([(a.view(), b.view()) for a, b in self.boards],
                                       built.env.observation_space.shape[0],
                                       parse=msg_to_shard_packet, expect=expect)
        self.runtime = WorkerRuntime(built, self._send, self._install_weights,
                                     log=LoggingAdapter(self.get_logger()))
        self.transitions_pub = self.create_publisher(TransitionBatch, topics.TRANSITIONS,
                                                     qos.TRANSITIONS)
        self.status_pub = self.create_publisher(WorkerStatus, topics.WORKER_STATUS, qos.STATUS)
        self.entities = [self.transitions_pub, self.status_pub]
        for shard, (latest, keyframe) in enumerate(self.boards):
            self.entities.append(self.create_subscription(
                PolicyWeights, topics.weights_topic(shard), self._store_on(latest),
                qos.WEIGHTS))
            self.entities.append(self.create_subscription(
                PolicyWeights, topics.keyframe_topic(shard), self._store_on(keyframe),
                qos.WEIGHTS))
        # Learner stats pace a simulated worker and are the heartbeat of a real arm's gate.
        self.entities.append(self.create_subscription(
            TrainingStats, topics.TRAINING_STATS, self._on_stats, qos.METRICS))
        self.entities.append(self.create_timer(1.0 / self.transport.diagnostics_hz,
                                               self._publish_status))
        self.get_logger().info(f'worker {self.worker_id} configured ({self.cfg.backend})')
        return True

    def stepping(self) -> Any:
        """Return the runtime's stepping loop."""
        self.runtime.stop_event.clear()
        return self.runtime.run

    def request_stop(self) -> None:
        """Stop the runtime (a step held by the policy gate returns)."""
        if self.runtime is not None:
            self.runtime.stop()
        else:
            super().request_stop()

    def release(self) -> None:
        """Release the topics and the environment."""
        super().release()
        self.runtime = None

    # ------------------------------------------------------------------ transport
    @staticmethod
    def _store_on(board: MemoryBoard) -> Any:
        def store(msg: PolicyWeights) -> None:
            board.publish(msg, msg.version)  # only store: the stepping thread decodes
        return store

    def _on_stats(self, msg: TrainingStats) -> None:
        runtime = self.runtime  # only record: the stepping thread / gate decide
        if runtime is not None:
            runtime.learner_heard(int(msg.policy_version), int(msg.env_steps),
                                  int(msg.env_steps_wanted))

    def _install_weights(self) -> PolicyState | None:
        """Return a new policy from the stored shard messages, if any (stepping thread)."""
        return self.runtime.receive(self.receiver)

    def _send(self, batch: Batch, episodes: list[dict[str, float]]) -> bool:
        """Publish a full batch, keep the episodes for the status (stepping thread)."""
        if episodes:
            with self._episodes_lock:
                self._episodes.extend(episodes)
        msg = batch_to_msg(batch, self.worker_id, self.source,
                           stamp=self.get_clock().now().to_msg())
        try:
            self.transitions_pub.publish(msg)
        except Exception:  # noqa: B902 -- rclpy raises RCLError once the context is shut down
            if self.context.ok():
                raise
            self.runtime.stop()  # Ctrl-C shut ROS down: stop stepping, close() stops the arm
            return False
        return True

    def _publish_status(self) -> None:
        if self.runtime is None:
            return
        worker = self.runtime.worker
        now = time.monotonic()
        then, steps_then = self._last_status
        self._last_status = (now, worker.steps)
        with self._episodes_lock:
            episodes, self._episodes = self._episodes, []
        msg = WorkerStatus()
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.worker_id = self.worker_id
        msg.source = self.source
        msg.state = self.runtime.state if self.label == 'active' else self.label
        msg.policy_version = int(worker.policy.version)
        msg.steps = int(worker.steps)
        msg.batches_sent = int(self.runtime.batches_sent)
        received = self.receiver.stats()
        msg.weights_accepted = int(received['weights/accepted'])
        msg.weights_rejected = int(received['weights/rejected'] + self.runtime.load_errors)
        msg.policies_received = int(self.runtime.policies_received)
        msg.weights_full_packets = int(received['weights/full_packets'])
        msg.weights_delta_packets = int(received['weights/delta_packets'])
        msg.weights_resyncs = int(received['weights/resyncs'])
        msg.weights_bytes_received = int(received['weights/bytes_received'])
        msg.steps_per_s = float((worker.steps - steps_then) / max(now - then, 1e-6))
        msg.episodes = len(episodes)
        if episodes:
            msg.episodic_return = float(np.mean([e['charts/episodic_return'] for e in episodes]))
            rank = f'charts/final_{worker.episodes.rank.key}'  # the task's rank metric
            msg.final_distance = float(np.mean([e[rank] for e in episodes]))
        msg.success_rate = float(worker.episodes.success_rate)
        self.status_pub.publish(msg)
        self.publish_loop_diagnostics()


def main(args: list[str] | None = None) -> int:
    """Run one env worker (it waits for the launch file, or ``ros2 lifecycle set``)."""
    return run_node(EnvWorkerNode, args)


if __name__ == '__main__':
    raise SystemExit(main())
