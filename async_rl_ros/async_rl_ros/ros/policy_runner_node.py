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
``policy_runner`` node: run an exported policy on a worker backend, without learning.

For deployment and evaluation: *configure* checks the policy file the learner exports
(``<log_dir>/latest/policy.pt``: TorchScript, deterministic actions, normalization inside, a
manifest naming its task and widths: :mod:`async_rl_ros.core.policy_file`), builds the
environment from the ``env_worker`` parameters -- the same environment, and so the same
safety filter, as a training worker -- refuses a policy exported for another task or other
widths, and fits the policy for the control loop (one intra-op thread, frozen, warmed up
before the first command, its actions checked: see
:class:`~async_rl_ros.core.workers.inference.FittedPolicy`); *activate* starts the episodes
in a thread; *deactivate* stops it and stops the arm. Episode results go out as WorkerStatus on
``policy_runner/status`` (``worker_id`` is the ``runner_id`` parameter).
"""

from __future__ import annotations

import threading
from typing import Any

from async_rl_ros.core.config import EnvWorkerConfig
from async_rl_ros.core.learning.evaluation import EpisodeTracker
from async_rl_ros.core.policy_file import PolicyFileError, read_manifest
from async_rl_ros.core.workers.inference import FittedPolicy
from async_rl_ros.core.workers.runtime import backend_call
from async_rl_ros.envs.factory import build_env, check_config
from async_rl_ros.ros import qos, topics
from async_rl_ros.ros.arm_node import ArmNode
from async_rl_ros.ros.node_utils import run_node
from async_rl_ros.ros.params import declare_task, SectionParameters
from async_rl_ros_interfaces.msg import WorkerStatus
import numpy as np
from rcl_interfaces.msg import IntegerRange, ParameterDescriptor

__all__ = ['PolicyRunnerNode', 'main']


class PolicyRunnerNode(ArmNode):
    """Deterministic rollouts of an exported policy (parameters: ``env_worker`` section, ...)."""

    def __init__(self, **kwargs):
        super().__init__('policy_runner', **kwargs)
        defaults = declare_task(self).get('env_worker')  # the task's own, under the file
        self.cfg = SectionParameters(self, EnvWorkerConfig, on_change=self.on_env_config,
                                     check=check_config, defaults=defaults).section
        self.policy_path = self.declare_parameter(
            'policy_path', 'runs/async_rl/latest/policy.pt', ParameterDescriptor(
                description='TorchScript policy exported by the learner (default: that of '
                'the newest run).', read_only=True)).value
        self.episodes_wanted = self.declare_parameter('episodes', 0, ParameterDescriptor(
            description='Episodes to run, then stop stepping (0: until deactivated).',
            integer_range=[IntegerRange(from_value=0, to_value=2**31 - 1, step=1)])).value
        self.runner_id = self.declare_parameter('runner_id', 0, ParameterDescriptor(
            description='Id in the status messages.', read_only=True,
            integer_range=[IntegerRange(from_value=0, to_value=2**31 - 1, step=1)])).value
        self.source = 'sim' if self.cfg.backend == 'sim' else 'real'
        self.policy: FittedPolicy | None = None
        self.tracker = EpisodeTracker()
        self.steps = 0
        self._episodes: list[dict[str, float]] = []
        self._lock = threading.Lock()
        self.status_pub = self.create_publisher(WorkerStatus, topics.POLICY_RUNNER_STATUS,
                                                qos.STATUS)

    def build(self) -> bool:
        """Check the policy file, make and connect the environment, fit the policy to it."""
        try:
            read_manifest(self.policy_path)  # not a policy file: refused before an arm moves
        except PolicyFileError as exc:
            self.get_logger().error(f'policy file {exc}')
            return False
        try:
            # a fixed policy: no learner's gate (a cube cell still holds for its inputs)
            self.env, spec = build_env(self.cfg, object_pose=self.object_pose(self.cfg))
            self.tracker = EpisodeTracker(rank=spec.rank)
        except Exception as exc:  # noqa: B902 -- a backend that cannot connect: report it
            self.get_logger().error(f'cannot build the {self.cfg.backend} environment: {exc}')
            return False
        try:  # its task and widths against the environment's, its actions against the task
            self.policy = FittedPolicy.load(self.policy_path, spec.name, spec.obs_dim,
                                            spec.act_dim)
        except PolicyFileError as exc:
            self.get_logger().error(f'policy file {exc}')
            self.release()  # the environment goes with the configure that failed
            return False
        self.get_logger().info(f'policy fit for the control loop: {self.policy.summary()}')
        self.entities = [self.create_timer(1.0, self._publish_status)]
        return True

    def stepping(self) -> Any:
        """Return the episode loop."""
        return self._run

    def _act(self, obs: np.ndarray) -> np.ndarray:
        return self.policy(obs)

    def loop_summary(self) -> dict[str, Any]:
        """Return the policy's latency and, on a real arm, the step budget (diagnostics)."""
        out: dict[str, Any] = {'policy': self.policy.summary() if self.policy else {}}
        backend = getattr(getattr(self.env, 'unwrapped', None), 'backend', None)
        if hasattr(backend, 'summary'):
            out['arm'] = backend.summary()
        return out

    def _run(self) -> None:
        try:
            self._episodes_until_stopped()
        except Exception as exc:  # noqa: B902 -- NeedsPerson included: stop, report, no retry
            if not self.stop_event.is_set():
                self.label = 'error'
                self.get_logger().error(f'policy runner stopped: {exc!r}')
        finally:
            backend_call(self.env, 'stop')

    def _episodes_until_stopped(self) -> None:
        env = self.env
        obs, _ = env.reset(seed=self.cfg.seed)
        while not self.stop_event.is_set():
            obs, reward, terminated, truncated, info = env.step(self._act(obs))
            self.steps += 1
            done = terminated or truncated
            self.tracker.step(reward, done, info, emit=self._record)
            if done:
                if self.episodes_wanted and len(self.tracker.returns) >= self.episodes_wanted:
                    backend_call(env, 'stop')
                    self.get_logger().info(
                        f'{len(self.tracker.returns)} episodes, success rate '
                        f'{self.tracker.success_rate:.2f}')
                    return
                obs, _ = env.reset()

    def _record(self, metrics: dict[str, float]) -> None:
        with self._lock:
            self._episodes.append(metrics)

    def _publish_status(self) -> None:
        with self._lock:
            episodes, self._episodes = self._episodes, []
        msg = WorkerStatus()
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.worker_id = self.runner_id
        msg.source = self.source
        msg.state = self.label
        msg.policy_version = -1
        msg.steps = int(self.steps)
        msg.episodes = len(episodes)
        if episodes:
            msg.episodic_return = float(np.mean([e['charts/episodic_return'] for e in episodes]))
            rank = f'charts/final_{self.tracker.rank.key}'  # the task's rank metric
            msg.final_distance = float(np.mean([e[rank] for e in episodes]))
        msg.success_rate = float(self.tracker.success_rate)
        self.status_pub.publish(msg)
        self.publish_loop_diagnostics()


def main(args: list[str] | None = None) -> int:
    """Run the policy runner (activate it with the launch file or ``ros2 lifecycle set``)."""
    return run_node(PolicyRunnerNode, args)


if __name__ == '__main__':
    raise SystemExit(main())
