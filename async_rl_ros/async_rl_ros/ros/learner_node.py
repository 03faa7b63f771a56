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
``learner`` node: SAC training fed by the workers' topics, commits to the shard nodes.

Wiring: the node is the ROS transport of the one
:class:`~async_rl_ros.core.learning.loop.TrainingLoop`, which runs in the training thread::

    /<worker>/transitions --subscription (enqueue only)--> TransitionIngest --preprocessing
      thread (msg_to_batch: dims checked, bad batches counted)--> take() --> the loop:
      ingest, update, every commit_every updates publish(): ShardedCommitter ->
      /commits/shard_<i> (WeightsCommit) -> param_server nodes -> /weights/shard_<i>

Transition topics are discovered (every ``*/transitions`` of type TransitionBatch), so
respawned or added workers join by themselves. A shard that reports ``needs_full`` gets its
partitions whole, from the training thread (the only user of the committer). Scalar metrics
go to ``/learner/metrics/<name>`` (std_msgs/Float32, for rqt_plot; the topics of the known
metrics exist from the node's start, before their first value), the TrainingStats message
and TensorBoard; ``/diagnostics`` carries the training doctor, the ingest counters,
the health and policy lag of every worker and the version of every shard. With
``transport.warm_start_bag`` the replay buffer starts filled from a ``ros2 bag record`` of
transition topics (:mod:`.bag_reader`); those transitions are no env steps of this run.

Evaluation as in the local runner: every ``eval_every`` env steps a policy snapshot goes to an
evaluator process (simulated arm, the workers' ``task.*``, ``manipulation.*``, ``safety.*``
and ``sim.*``, fixed seeds) that never stops training; its scores are ``eval/*`` metrics
(TensorBoard and topics), and the exported ``policy.pt`` is the best evaluated policy. At the
budget's end the last policy is scored too and the exported one is judged on held-out episodes
(``summary.json``).
"""

from __future__ import annotations

import pathlib
import threading
import time
from typing import Any

from async_rl_ros.core.config import (EnvWorkerConfig, LEARNER_ENV_SECTIONS, LearnerConfig,
                                      RosTransportConfig)
from async_rl_ros.core.learning.artifacts import finish_run
from async_rl_ros.core.learning.doctor import TrainingDiverged
from async_rl_ros.core.learning.learner import Learner
from async_rl_ros.core.learning.loop import Received, TrainingLoop
from async_rl_ros.core.learning.metrics import MetricsLogger, RECORD
from async_rl_ros.core.learning.resume import replay_note, resume_learner
from async_rl_ros.core.learning.run_folder import open_run
from async_rl_ros.core.records import PolicyState
from async_rl_ros.core.transport.worker_table import WorkerTable
from async_rl_ros.core.weights.receiver import weights_summary
from async_rl_ros.core.weights.sharded_weights import ShardedCommitter
from async_rl_ros.core.workers.inline import final_evaluation
from async_rl_ros.envs.factory import evaluation_config, evaluation_env
from async_rl_ros.envs.tasks import resolve_task
from async_rl_ros.local.evaluator import EvaluatorProcess
from async_rl_ros.ros import qos, topics
from async_rl_ros.ros.bag_reader import TRANSITION_TYPE, usable_bag, warm_start
from async_rl_ros.ros.conversions import shard_packet_to_msg, status_to_receiver_stats
from async_rl_ros.ros.diagnostics import LearnerDiagnostics
from async_rl_ros.ros.ingest import TransitionIngest
from async_rl_ros.ros.node_utils import log_late, run_node
from async_rl_ros.ros.params import declare_task, SectionParameters, within
from async_rl_ros_interfaces.msg import (ShardStatus, TrainingStats, TransitionBatch,
                                         WeightsCommit, WorkerStatus)
from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.node import Node
from std_msgs.msg import Float32
import torch

__all__ = ['LearnerNode', 'main']

DISCOVERY_PERIOD_S = 1.0  # s between two scans for new transition topics
#: The metrics :meth:`LearnerNode.topic_metrics` adds to the learner's own.
TOPIC_METRICS = ('charts/samples_per_s', 'charts/updates_per_s', 'charts/episodic_return',
                 'charts/success_rate', 'charts/policy_lag_mean', 'charts/policy_lag_max',
                 'transport/dropped_batches', 'transport/rejected_batches',
                 'transport/rejected_weights', 'transport/workers', 'eval/success_rate',
                 'eval/final_distance')


class LearnerNode(Node):
    """The learner (parameters: ``learner`` section, ``transport.*``, ``task.*``, ...)."""

    def __init__(self, **kwargs):
        super().__init__('learner', **kwargs)
        defaults = declare_task(self)  # the workers' task and its own defaults
        self.cfg = SectionParameters(self, LearnerConfig, defaults=defaults.get('learner')).section
        self.transport = SectionParameters(self, RosTransportConfig, 'transport.').section
        resume = self.declare_parameter('resume', False, ParameterDescriptor(
            description='Continue the latest run under log_dir, in its folder (false: a new '
            'run folder).',
            read_only=True)).value
        if self.cfg.sac.device != 'cuda':
            torch.set_num_threads(1)  # the workers share the CPU
        # The workers' task (task.name picks it; hindsight relabeling recomputes its rewards),
        # its options, safety limits and simulator (the evaluator's simulated arm).
        self.eval_env_cfg = EnvWorkerConfig().replace(**{
            f'{name}.{key}': value for name, cls in LEARNER_ENV_SECTIONS.items()
            for key, value in SectionParameters(
                self, cls, f'{name}.', frozen=True,
                defaults=within(defaults.get('env_worker', {}), f'{name}.'))
            .section.to_flat().items()})
        _, self.spec = resolve_task(evaluation_config(self.eval_env_cfg))  # opens no window
        self.obs_dim, self.act_dim = self.spec.obs_dim, self.spec.act_dim
        if self.transport.warm_start_bag:   # one it cannot use: refused before a run folder
            usable_bag(self.transport.warm_start_bag)
        # The run's own locked folder under log_dir (checkpoints, policy, summary, curve).
        self.run_folder, run_cfg = open_run(self.cfg, 'latest' if resume else None)
        # In place: the parameter callbacks keep updating the section the learner holds.
        self.cfg.log_dir = run_cfg.log_dir
        self.cfg.checkpoint.directory = run_cfg.checkpoint.directory
        try:
            found = self._start_learner(resume)
        except BaseException:
            self.run_folder.abandon()  # a refused start leaves no empty run folder behind
            raise
        self.committer = ShardedCommitter(self.transport.parameter_server,
                                          self.learner.policy_state())
        self.log_dir = pathlib.Path(self.cfg.log_dir)
        self.tb = MetricsLogger(self.log_dir / 'tensorboard')
        self.tb.record_to(self.log_dir / RECORD,
                          self.learner.env_steps if self.run_folder.resumed else None)

        self._lock = threading.Lock()  # shard table, resync requests
        self.workers = WorkerTable()
        self.shards: dict[int, tuple[float, ShardStatus]] = {}
        self._resync: set[int] = set()
        self._last_rates = (time.monotonic(), 0, 0)
        self._metric_pubs: dict[str, Any] = {}
        self._transition_subs: dict[str, Any] = {}
        self.finished = False

        self.ingest = TransitionIngest(self.obs_dim, self.act_dim,
                                       self.transport.max_raw_batches)
        self.diagnostics = LearnerDiagnostics(self.learner, self.committer, self.cfg.doctor,
                                              self.transport, self.ingest)
        self.commit_pubs = [self.create_publisher(WeightsCommit, topics.commits_topic(i),
                                                  qos.COMMITS)
                            for i in range(self.transport.parameter_server.num_shards)]
        self.stats_pub = self.create_publisher(TrainingStats, topics.TRAINING_STATS,
                                               qos.METRICS)
        self.diag_pub = self.create_publisher(DiagnosticArray, topics.DIAGNOSTICS,
                                              qos.DIAGNOSTICS)
        # Every metric topic exists from the start, before its first value: rqt_plot drops
        # a topic that does not exist when a perspective is restored.
        for name in (*self.learner.metric_names(), *TOPIC_METRICS):
            self._metric_publisher(name)
        self.create_subscription(WorkerStatus, topics.WORKER_STATUS, self._on_worker_status,
                                 qos.STATUS)
        self.create_subscription(ShardStatus, topics.SHARD_STATUS, self._on_shard_status,
                                 qos.STATUS)
        self.create_timer(DISCOVERY_PERIOD_S, self._discover)
        self.create_timer(1.0 / self.transport.metrics_hz, self._publish_metrics)
        self.create_timer(1.0 / self.transport.diagnostics_hz, self._publish_diagnostics)
        self._stop = threading.Event()
        self._saving = threading.Lock()  # one save at a time: the budget's end or shutdown
        self.evaluator = (EvaluatorProcess(self.eval_env_cfg, self.cfg.sac.hidden_sizes,
                                           self.cfg.eval_episodes)
                          if self.cfg.eval_every else None)
        self.loop = TrainingLoop(self.learner, self, self,
                                 commit_every=self.transport.parameter_server.commit_every,
                                 logger=self.tb, stats_interval_s=1.0 / self.transport.metrics_hz,
                                 evaluator=self.evaluator)
        if found is not None:  # the best snapshots scored before the checkpoint
            self.get_logger().info(self.loop.restore_evaluations(found.state))
        self._thread = threading.Thread(target=self._train, name='training', daemon=True)
        self._thread.start()
        self.get_logger().info(
            f'learner on {self.learner.device}: {self.transport.parameter_server.num_shards} '
            f'shards, commit every {self.transport.parameter_server.commit_every} updates')

    # ------------------------------------------------------------------ data in
    def _discover(self) -> None:
        for name, types in self.get_topic_names_and_types():
            if (name.endswith('/' + topics.TRANSITIONS) and TRANSITION_TYPE in types
                    and name not in self._transition_subs):
                self._transition_subs[name] = self.create_subscription(
                    TransitionBatch, name, self.ingest.put, qos.TRANSITIONS)
                self.get_logger().info(f'receiving transitions from {name}')

    # ------------------------------------------------------------------ the loop's ports
    blocking = False  # subscriptions never wait: the loop takes what arrived

    def take(self) -> list[Received]:
        """BatchSource: the preprocessed batches (training thread)."""
        now = time.monotonic()
        out = []
        for batch, worker_id, source in self.ingest.take():
            out.append(Received(batch, worker_id))
            acted = batch['policy_version']
            self.workers.received(worker_id, len(batch['reward']),
                                  int(acted.max()) if len(acted) else -1, source, now)
        return out

    def wait(self, timeout: float) -> None:
        """BatchSource: block until a batch is ready or ``timeout`` s passed."""
        self.ingest.wait(timeout)

    def maintain(self, learner: Learner) -> None:
        """BatchSource: re-sync shards that asked for a full commit."""
        self._handle_resyncs()

    def publish(self, state: PolicyState) -> int | None:
        """WeightSink: commit to the shards; return the version they will serve."""
        packets = self.committer.commit(state)
        if packets is None:
            return None
        stamp = self.get_clock().now().to_msg()
        for packet in packets:
            self.commit_pubs[packet.shard_id].publish(
                shard_packet_to_msg(packet, 'WeightsCommit', stamp=stamp))
        return self.committer.version

    # ------------------------------------------------------------------ training thread
    def _train(self) -> None:
        loop = self.loop
        try:
            loop.maybe_publish()
            while not self._stop.is_set():
                if self.learner.env_steps >= self.cfg.total_env_steps:
                    if not self.finished:
                        self._finish()
                    self.maintain(self.learner)
                    self._stop.wait(0.1)
                    continue
                loop.step()
        except TrainingDiverged as exc:
            self.get_logger().fatal(f'training diverged, stopped: {exc}; the last good state '
                                    'is saved at shutdown')
        except Exception as exc:  # noqa: B902 -- report, the node stays up for diagnostics
            if not self.context.ok():
                return  # Ctrl-C shut ROS down under a publish: close() saves everything
            self.get_logger().fatal(f'training thread stopped: {exc!r}')
            raise

    def _handle_resyncs(self) -> None:
        with self._lock:
            shards, self._resync = self._resync, set()
        for shard_id in sorted(shards):
            packet = self.committer.full(shard_id)
            self.commit_pubs[shard_id].publish(shard_packet_to_msg(
                packet, 'WeightsCommit', stamp=self.get_clock().now().to_msg()))
            self.get_logger().info(f'shard {shard_id}: full commit at version '
                                   f'{packet.packet.version}')

    def _finish(self) -> None:
        """Training budget reached: final commit, checkpoint, policy and summary.json."""
        self.loop.commit()
        self.save(evaluate=True)
        log_late(self, f'training budget of {self.cfg.total_env_steps} env steps reached; '
                       f'policy exported to {self.log_dir / "policy.pt"}')

    def save(self, evaluate: bool = False) -> None:
        """
        Write the checkpoint, the TorchScript policy, the curve and ``summary.json``.

        :param evaluate: score the last policy, choose the export on selection episodes and
            judge it on held-out ones (at the budget's end; a shutdown exports the best
            evaluated one at once, and one during this evaluation cuts it short).
        """
        with self._saving:
            if not self.finished:
                self._save(evaluate)

    def _save(self, evaluate: bool) -> None:
        received = [status_to_receiver_stats(s) for s in self.workers.statuses()]
        extra = {'mode': 'ros2', 'workers': len(self.workers),
                 'dropped_batches': self.ingest.dropped,
                 'rejected_batches': self.ingest.rejected_total(),
                 'interrupted': self.learner.env_steps < self.cfg.total_env_steps}
        if self.warm_start:
            extra['warm_start'] = self.warm_start
        extra.update(weights_summary(received, self.committer.fp32_bytes))
        extra.update(self.spec.describe())
        env = evaluation_env(self.eval_env_cfg)[0] if evaluate else None
        try:
            finish_run(self.loop, self.log_dir, title=f'{self.spec.name}, SAC over ROS 2',
                       extra=extra, rank=self.spec.rank,
                       evaluate=final_evaluation(env, self.cfg, self.spec.rank,
                                                 self._stop.is_set) if env else None)
        finally:
            if env is not None:
                env.close()
        self.finished = True

    # ------------------------------------------------------------------ status in
    def _on_worker_status(self, msg: WorkerStatus) -> None:
        self.workers.reported(int(msg.worker_id), msg, time.monotonic())

    def _on_shard_status(self, msg: ShardStatus) -> None:
        with self._lock:
            self.shards[int(msg.shard_id)] = (time.monotonic(), msg)
            if msg.needs_full and msg.shard_id < len(self.commit_pubs):
                self._resync.add(int(msg.shard_id))

    # ------------------------------------------------------------------ metrics out
    def metrics(self) -> dict[str, float]:
        """BatchSource: transport metrics for the loop's reports (TensorBoard)."""
        return {'transport/dropped_batches': float(self.ingest.dropped),
                'transport/rejected_batches': float(self.ingest.rejected_total())}

    def topic_metrics(self) -> dict[str, float]:
        """Return the metrics published on topics and in TrainingStats."""
        now = time.monotonic()
        then, steps, updates = self._last_rates
        learner = self.learner
        dt = max(now - then, 1e-6)
        self._last_rates = (now, learner.env_steps, learner.updates)
        out = dict(learner.metrics())
        out.update(self.loop.update_metrics)
        out.update(self.workers.metrics(learner.policy_version))
        out['charts/samples_per_s'] = (learner.env_steps - steps) / dt
        out['charts/updates_per_s'] = (learner.updates - updates) / dt
        if self.loop.evaluations:  # the evaluator's latest score
            latest = self.loop.evaluations[-1].stats
            out['eval/success_rate'] = float(latest.success_rate)
            out[f'eval/final_{latest.rank.key}'] = float(latest.mean_final)
        out.update(self.metrics())
        return out

    def _metric_publisher(self, name: str) -> Any:
        """Return the Float32 publisher of a metric (created on first use)."""
        pub = self._metric_pubs.get(name)
        if pub is None:
            pub = self._metric_pubs[name] = self.create_publisher(
                Float32, topics.metric_topic(name), qos.METRICS)
        return pub

    def _publish_metrics(self) -> None:
        metrics = self.topic_metrics()
        for name, value in metrics.items():
            self._metric_publisher(name).publish(Float32(data=float(value)))
        stats = TrainingStats()
        stats.header.stamp = self.get_clock().now().to_msg()
        stats.policy_version = int(self.learner.policy_version)
        stats.env_steps = int(self.learner.env_steps)
        stats.updates = int(self.learner.updates)
        stats.samples_per_s = float(metrics['charts/samples_per_s'])
        stats.updates_per_s = float(metrics['charts/updates_per_s'])
        stats.policy_lag = float(metrics['charts/policy_lag_mean'])
        slack = self.cfg.rate_limit_slack
        stats.env_steps_wanted = self.learner.env_steps_wanted(slack) if slack else -1
        stats.names = list(metrics)
        stats.values = [float(v) for v in metrics.values()]
        self.stats_pub.publish(stats)

    def _publish_diagnostics(self) -> None:
        with self._lock:
            shards = dict(self.shards)
        array_ = DiagnosticArray()
        array_.header.stamp = self.get_clock().now().to_msg()
        array_.status = self.diagnostics.statuses(
            time.monotonic(), workers=self.workers.snapshot(), shards=shards,
            topics=len(self._transition_subs))
        self.diag_pub.publish(array_)

    def _start_learner(self, resume: bool) -> Any:
        """Build the learner, resumed or warm-started, record its parameters; return the resume."""
        self.learner = Learner(self.cfg, self.obs_dim, self.act_dim, goal_spec=self.spec.goal,
                               task=self.spec.name)
        found = None
        if resume:  # the CLI's rules: corrupt files skipped and named, no silent fresh start
            found = resume_learner(self.learner)
            for path, why in found.skipped:
                self.get_logger().warning(f'checkpoint {path} skipped: {why}')
            self.get_logger().info(f'resumed from {found.path} at {self.learner.env_steps} '
                                   'env steps')
            self.get_logger().info(replay_note(self.learner))
        # transport.warm_start_bag: what was loaded (summary.json); a bad recording stops here
        self.warm_start = warm_start(self.learner, self.transport.warm_start_bag,
                                     self.get_logger().info)
        self.run_folder.save_parameters('learner', {  # what the run trains with, from launch
            name: param.value for name, param in self.get_parameters_by_prefix('').items()
            if name != 'resume'})
        return found

    # ------------------------------------------------------------------ shutdown
    def close(self) -> None:
        """Stop training, then write the final checkpoint and the exported policy."""
        self._stop.set()
        self._thread.join(timeout=30.0)
        self.ingest.close()
        if self.evaluator is not None:
            self.evaluator.close()
        try:
            self.save()  # unless the budget's end wrote everything (it waits for that save)
        except Exception as exc:  # noqa: B902 -- shutting down: report, never hang
            log_late(self, f'final checkpoint failed: {exc}', 'error')
        finally:
            self.run_folder.close()


def main(args: list[str] | None = None) -> int:
    """Run the learner."""
    return run_node(LearnerNode, args)


if __name__ == '__main__':
    raise SystemExit(main())
