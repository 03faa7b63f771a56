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
The lifecycle every node that drives an arm shares (``env_worker``, ``policy_runner``).

*configure* builds (connects) the environment -- the subclass's :meth:`ArmNode.build` --;
*activate* resumes the arm and starts the stepping thread (:meth:`ArmNode.stepping`);
*deactivate* asks the thread to stop, waits for it and stops the arm; *cleanup*, *shutdown*
and *error* also release the environment and the node's timers, publishers and
subscriptions. The node's ``label`` (unconfigured, inactive, active, finalized) goes into
its status messages. A physical arm's control loop (its step budget: step and phase
percentiles, deadline misses by cause, real-time priorities) goes out on ``/diagnostics``
with every status (:meth:`ArmNode.publish_loop_diagnostics`). A cube task on a physical arm
takes the cube's pose from ``cell.pose_topic`` (:meth:`ArmNode.object_pose`).
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from async_rl_ros.core.workers.runtime import backend_call
from async_rl_ros.core.workers.step_budget import loop_health
from async_rl_ros.envs.factory import needs_object_pose
from async_rl_ros.envs.object_pose import PoseBoard
from async_rl_ros.ros import qos, topics
from async_rl_ros.ros.diagnostics import diagnostic_status, OK, WARN
from async_rl_ros.ros.node_utils import apply_env_config
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.publisher import Publisher
from rclpy.subscription import Subscription
from rclpy.timer import Timer

__all__ = ['ArmNode']

JOIN_TIMEOUT_S = 10.0  # a step held by a real arm returns on interrupt well before this


class ArmNode(LifecycleNode):
    """
    A lifecycle node with an environment and one stepping thread.

    Subclasses implement :meth:`build` (return ``False`` on failure, after logging why) and
    :meth:`stepping` (the thread's target, which returns once :attr:`stop_event` is set); they
    may override :meth:`request_stop` and :meth:`stop_arm`.
    """

    def __init__(self, node_name: str, **kwargs: Any):
        super().__init__(node_name, **kwargs)
        self.env: Any = None
        self.label = 'unconfigured'
        self.stop_event = threading.Event()
        self.entities: list[Any] = []  # timers, publishers, subscriptions of configure
        self._thread: threading.Thread | None = None
        self._diag_pub = self.create_publisher(DiagnosticArray, topics.DIAGNOSTICS,
                                               qos.DIAGNOSTICS)
        self._misses = 0
        self._pose_subscription: Subscription | None = None

    def object_pose(self, cfg: Any) -> PoseBoard | None:
        """
        Return the board of the cube's pose for a physical cube cell, else ``None``.

        Call it in :meth:`build` before the environment is built (which needs it): the node
        subscribes to ``cell.pose_topic`` (``geometry_msgs/PoseStamped``), and the callback
        only hands each pose to the board, which checks it against ROS time.
        """
        if self._pose_subscription is not None:   # a configure that failed before
            self.destroy_subscription(self._pose_subscription)
            self._pose_subscription = None
        if not needs_object_pose(cfg):
            return None
        board = PoseBoard.from_config(
            cfg, clock=lambda: self.get_clock().now().nanoseconds * 1e-9)

        def offer(msg: PoseStamped) -> None:
            p, o = msg.pose.position, msg.pose.orientation
            stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
            board.offer(msg.header.frame_id, (p.x, p.y, p.z), (o.x, o.y, o.z, o.w), stamp)

        self._pose_subscription = self.create_subscription(
            PoseStamped, cfg.cell.pose_topic, offer, qos.OBJECT_POSE)
        return board

    # ------------------------------------------------------------------ subclass hooks
    def build(self) -> bool:
        """Build (connect) :attr:`env` and the node's entities; return success."""
        raise NotImplementedError

    def stepping(self) -> Callable[[], None]:
        """Return the stepping thread's target."""
        raise NotImplementedError

    def request_stop(self) -> None:
        """Ask the stepping thread to return; a step held by a real arm returns at once."""
        self.stop_event.set()
        if self.env is not None:
            backend_call(self.env, 'interrupt')

    def publish_loop_diagnostics(self) -> None:
        """Publish the arm's control loop on ``/diagnostics`` (a simulated arm has none)."""
        backend = getattr(getattr(self.env, 'unwrapped', self.env), 'backend', None)
        summary = getattr(backend, 'summary', None)
        if summary is None:
            return
        level, message, values, self._misses = loop_health(summary(), self._misses)
        array_ = DiagnosticArray()
        array_.header.stamp = self.get_clock().now().to_msg()
        array_.status = [diagnostic_status(
            f'{self.get_fully_qualified_name()}: control loop',
            WARN if level == 'warn' else OK, message, values,
            hardware_id=str(getattr(backend, 'ip', '')))]
        self._diag_pub.publish(array_)

    def on_env_config(self, section: Any, keys: tuple[str, ...]) -> None:
        """Apply an accepted ``env_worker`` parameter change to the running environment."""
        apply_env_config(self.get_logger(), self.env, section, keys)

    def stop_arm(self) -> None:
        """Stop the arm (a simulated one: nothing to do)."""
        if self.env is not None:
            backend_call(self.env, 'stop')

    # ------------------------------------------------------------------ lifecycle
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Build (connect) the environment and the topics."""
        if not self.build():
            return TransitionCallbackReturn.FAILURE
        self.label = 'inactive'
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Resume the arm and start stepping."""
        self.stop_event.clear()
        backend_call(self.env, 'resume')
        self._thread = threading.Thread(target=self.stepping(), name=self.get_name(),
                                        daemon=True)
        self._thread.start()
        self.label = 'active'
        return TransitionCallbackReturn.SUCCESS

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Stop stepping, then stop the arm."""
        self.halt()
        self.label = 'inactive'
        return TransitionCallbackReturn.SUCCESS

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Release the environment and the topics."""
        self.release()
        self.label = 'unconfigured'
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Stop and release everything."""
        self.close()
        return TransitionCallbackReturn.SUCCESS

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Stop the arm and release the environment after an error."""
        self.close()
        return TransitionCallbackReturn.SUCCESS

    def close(self) -> None:
        """Stop the thread and the arm and release the environment (idempotent)."""
        self.halt()
        self.release()
        self.label = 'finalized'

    def halt(self) -> None:
        """Stop the stepping thread, then the arm (report, never raise)."""
        self.request_stop()
        if self._thread is not None:
            self._thread.join(timeout=JOIN_TIMEOUT_S)
            self._thread = None
        try:
            self.stop_arm()
        except Exception as exc:  # noqa: B902 -- report; the watchdog still stops the arm
            self.get_logger().error(f'stopping the arm failed: {exc}')

    def release(self) -> None:
        """Destroy the entities of configure and close the environment."""
        for entity in self.entities:
            if isinstance(entity, Timer):
                self.destroy_timer(entity)
            elif isinstance(entity, Publisher):
                self.destroy_publisher(entity)
            elif isinstance(entity, Subscription):
                self.destroy_subscription(entity)
        self.entities = []
        if self._pose_subscription is not None:
            self.destroy_subscription(self._pose_subscription)
            self._pose_subscription = None
        if self.env is not None:
            self.env.close()
            self.env = None
