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
With rclpy (skipped without ROS 2): real messages, serialization, node parameters, topics.

DDS stays on this machine: ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` (Jazzy),
``ROS_LOCALHOST_ONLY=1`` (Humble) and a domain id of its own.
"""

import array
import ast
import json
import os
import pathlib
import time

os.environ.setdefault('ROS_DOMAIN_ID', '61')
os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
if os.environ.get('ROS_DISTRO') == 'humble':  # Jazzy warns that it is deprecated
    os.environ.setdefault('ROS_LOCALHOST_ONLY', '1')

import pytest  # noqa: E402

rclpy = pytest.importorskip('rclpy')
pytest.importorskip('async_rl_ros_interfaces.msg')

from async_rl_ros.core.config import (EnvWorkerConfig, ParameterServerConfig,  # noqa: E402, I100
                                      RosTransportConfig)
from async_rl_ros.core.records import PolicyState  # noqa: E402
from async_rl_ros.core.weights.assembler import ShardAssembler  # noqa: E402
from async_rl_ros.core.weights.codec import CodecError  # noqa: E402
from async_rl_ros.core.weights.sharded_weights import ShardedCommitter, ShardReplica  # noqa: E402
from async_rl_ros.envs.reach_env import UR5ReachEnv  # noqa: E402
from async_rl_ros.ros import conversions  # noqa: E402
from async_rl_ros.ros.env_worker_node import EnvWorkerNode  # noqa: E402
from async_rl_ros.ros.learner_node import LearnerNode  # noqa: E402
from async_rl_ros.ros.params import SectionParameters  # noqa: E402
from async_rl_ros_interfaces.msg import (PolicyWeights, TransitionBatch,  # noqa: E402
                                         WeightsCommit)
import numpy as np  # noqa: E402
from rcl_interfaces.msg import ParameterType  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from rclpy.serialization import deserialize_message, serialize_message  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402

PERSPECTIVE = pathlib.Path(__file__).resolve().parents[1] / 'config' / 'async_rl.perspective'


@pytest.fixture(scope='module')
def context():
    rclpy.init()
    yield
    rclpy.try_shutdown()


def _batch(rng, n=64):
    return {'obs': rng.normal(size=(n, 21)).astype(np.float32),
            'action': rng.uniform(-1, 1, (n, 6)).astype(np.float32),
            'reward': rng.normal(size=n).astype(np.float32),
            'next_obs': rng.normal(size=(n, 21)).astype(np.float32),
            'terminated': rng.random(n) < 0.1, 'truncated': rng.random(n) < 0.1,
            'policy_version': np.full(n, 7, np.int64), 'worker_id': np.full(n, 2, np.int32)}


def test_transition_batch_survives_the_wire():
    batch = _batch(np.random.default_rng(0))
    msg = conversions.batch_to_msg(batch, 2, 'sim')
    assert isinstance(msg, TransitionBatch)
    wire = deserialize_message(serialize_message(msg), TransitionBatch)
    back = conversions.msg_to_batch(wire, 21, 6)
    assert back.pop('source').tolist() == [0] * len(batch['reward'])  # index of 'sim'
    for key, value in batch.items():
        np.testing.assert_array_equal(back[key], value, err_msg=key)
    wire.count = 63
    with pytest.raises(CodecError):
        conversions.msg_to_batch(wire, 21, 6)


def test_the_learner_takes_a_batch_once_and_counts_a_second_delivery():
    from async_rl_ros.ros.ingest import TransitionIngest
    from builtin_interfaces.msg import Time

    ingest = TransitionIngest(21, 6, max_raw=8)
    try:
        rng = np.random.default_rng(1)
        msg = conversions.batch_to_msg(_batch(rng), 2, 'sim', stamp=Time(sec=5, nanosec=7))
        wire = deserialize_message(serialize_message(msg), TransitionBatch)
        assert ingest._preprocess(msg)[1:] == (2, 'sim')
        assert ingest._preprocess(wire) is None  # the same batch again
        other = conversions.batch_to_msg(_batch(rng), 3, 'sim', stamp=Time(sec=5, nanosec=7))
        assert ingest._preprocess(other) is not None  # another worker's
        unstamped = conversions.batch_to_msg(_batch(rng), 2, 'sim')
        assert ingest._preprocess(unstamped) is not None
        assert ingest._preprocess(unstamped) is not None  # not checked
        unstamped.count = 3
        assert ingest._preprocess(unstamped) is None
        assert ingest.rejected() == {'duplicate': 1, 'shape': 1}
        assert ingest.rejected_total() == 2
    finally:
        ingest.close()


def test_weight_shards_survive_the_wire_and_assemble():
    rng = np.random.default_rng(1)
    actor = {'w': rng.normal(size=(40, 21)).astype(np.float32),
             'b': rng.normal(size=40).astype(np.float32)}
    extras = {'obs_mean': np.zeros(21, np.float32), 'obs_std': np.ones(21, np.float32),
              'obs_clip': np.float32(10.0)}
    cfg = ParameterServerConfig(num_shards=2, replicas=1, chunk_size=300)
    committer = ShardedCommitter(cfg, PolicyState.from_parts(actor, extras, 0))
    shards = [ShardReplica(i, 2) for i in range(2)]
    assembler = ShardAssembler()
    for shard in shards:
        commit = conversions.shard_packet_to_msg(committer.full(shard.shard_id),
                                                 'WeightsCommit')
        commit = deserialize_message(serialize_message(commit), WeightsCommit)
        shard.apply(conversions.msg_to_shard_packet(commit))
    for step in range(3):
        actor = {k: v + 0.01 for k, v in actor.items()}
        packets = committer.commit(PolicyState.from_parts(actor, extras, 0))
        for shard, packet in zip(shards, packets):
            wire = deserialize_message(serialize_message(
                conversions.shard_packet_to_msg(packet, 'WeightsCommit')), WeightsCommit)
            shard.apply(conversions.msg_to_shard_packet(wire))
        state = None
        for shard in shards:
            for served in (shard.keyframe(), shard.weights()):  # a delta after the keyframe
                weights = deserialize_message(serialize_message(
                    conversions.shard_packet_to_msg(served)), PolicyWeights)
                state = assembler.add(conversions.msg_to_shard_packet(weights)) or state
        assert state is not None and state.version == step + 1
    for name, value in actor.items():
        np.testing.assert_allclose(state.actor[name].numpy(), value,
                                   atol=np.abs(value).max() / 100)


def test_parameters_have_descriptors_and_refuse_invalid_changes(context):
    node = rclpy.create_node('params_probe')
    try:
        params = SectionParameters(node, EnvWorkerConfig)
        transport = SectionParameters(node, RosTransportConfig, 'transport.')
        hz = node.describe_parameter('task.control_hz')
        assert hz.type == ParameterType.PARAMETER_DOUBLE and 'Hz' in hz.description
        assert hz.floating_point_range[0].from_value == 1.0
        assert hz.floating_point_range[0].to_value == 500.0
        assert node.describe_parameter('backend').read_only
        assert node.describe_parameter('transport.parameter_server.num_shards').read_only
        ok = node.set_parameters([Parameter('task.control_hz', value=50.0)])[0]
        assert ok.successful and params.section.task.control_hz == 50.0
        # Out of range: refused by the descriptor's range.
        bad = node.set_parameters([Parameter('task.control_hz', value=5000.0)])[0]
        assert not bad.successful and params.section.task.control_hz == 50.0
        # In range, but breaks a cross-field rule: refused by validate(), with the reason.
        box = node.set_parameters([Parameter('task.target_low', value=[-0.6, -0.3, 0.5])])[0]
        assert not box.successful and 'target' in box.reason
        frozen = node.set_parameters([Parameter('backend', value='sim')])[0]
        assert not frozen.successful
        rate = node.set_parameters([Parameter('transport.metrics_hz', value=4.0)])[0]
        assert not rate.successful and transport.section.metrics_hz == 2.0  # timer built once
        live = node.set_parameters([Parameter('transport.worker_timeout_s', value=9.0)])[0]
        assert live.successful and transport.section.worker_timeout_s == 9.0
    finally:
        node.destroy_node()


def test_a_parameter_change_reaches_the_commands(context):
    """The env worker's hook: ros2 param set -> on_change -> env.apply_config -> filter."""
    # Joint-velocity actions: the command is action_scale times the joint speed limit.
    node = rclpy.create_node('live_probe',
                             parameter_overrides=[Parameter('task.action', value='joint')])
    env = None
    changes = []
    try:
        params = SectionParameters(node, EnvWorkerConfig, on_change=lambda section, keys: (
            changes.append((keys, env.apply_config(section)))))
        env = UR5ReachEnv(params.section)
        env.reset(seed=0)
        commands = []
        step = env.backend.step
        env.backend.step = lambda qd: (commands.append(np.array(qd)), step(qd))[1]
        ok = node.set_parameters([Parameter('safety.max_joint_speed', value=[0.1] * 6)])[0]
        assert ok.successful and changes[-1][0] == ('safety.max_joint_speed',)
        assert changes[-1][1].now == ('safety.max_joint_speed',)
        env.step(np.ones(6, dtype=np.float32))
        np.testing.assert_allclose(commands[-1], 0.5 * 0.1)  # action_scale * new limit
    finally:
        if env is not None:
            env.close()
        node.destroy_node()


def test_nodes_started_by_hand_take_their_tasks_defaults_under_the_file(context, tmp_path):
    """``ros2 run ... --params-file`` with ``task.name: push``: what the launch file gives."""
    def params_file(name: str, learner: str) -> list[str]:
        path = tmp_path / name
        path.write_text('/**:\n  ros__parameters:\n    task: {name: push}\n'
                        f'learner:\n  ros__parameters:\n    log_dir: {tmp_path / name}.runs\n'
                        f'    eval_every: 0\n    sac: {{device: cpu{learner}}}\n'
                        f'    checkpoint: {{directory: {tmp_path / name}.ckpt}}\n')
        return ['--ros-args', '--params-file', str(path)]

    def learner_says(args: list[str]) -> tuple:
        learner = LearnerNode(cli_args=args)
        try:
            layers = [m.out_features for m in learner.learner.sac.actor.modules()
                      if isinstance(m, torch.nn.Linear)]
            return (learner.eval_env_cfg.task.name, list(learner.cfg.sac.hidden_sizes),
                    learner.cfg.total_env_steps, learner.cfg.max_updates_ramp_steps,
                    tuple(layers[:2]))
        finally:
            learner.close()
            learner.destroy_node()

    plain = params_file('push.yaml', '')
    assert learner_says(plain) == ('push', [256, 256], 100000, 25000, (256, 256))
    worker = EnvWorkerNode(cli_args=plain)
    try:  # the width of the weights the learner will send
        assert worker.cfg.task.name == 'push' and worker.hidden == (256, 256)
    finally:
        worker.destroy_node()
    # a value the file sets wins over the task's
    assert learner_says(params_file('own.yaml', ', hidden_sizes: [64, 64]')) == (
        'push', [64, 64], 100000, 25000, (64, 64))


def test_a_pick_and_place_worker_started_by_hand_acts_at_its_task_s_rate(context, tmp_path):
    """``task.name: pick_and_place``: 10 Hz and held starts for the worker, 10 Hz to evaluate."""
    path = tmp_path / 'pick.yaml'
    path.write_text('/**:\n  ros__parameters:\n    task: {name: pick_and_place}\n'
                    f'learner:\n  ros__parameters:\n    log_dir: {tmp_path}/runs\n'
                    f'    eval_every: 0\n    sac: {{device: cpu}}\n'
                    f'    checkpoint: {{directory: {tmp_path}/ckpt}}\n')
    args = ['--ros-args', '--params-file', str(path)]
    worker = EnvWorkerNode(cli_args=args)
    try:
        assert worker.cfg.task.control_hz == 10.0 and worker.cfg.sim.cube_in_gripper == 0.5
        assert worker.cfg.task.max_episode_steps == 40
    finally:
        worker.destroy_node()
    learner = LearnerNode(cli_args=args)
    try:
        assert learner.eval_env_cfg.task.control_hz == 10.0
    finally:
        learner.close()
        learner.destroy_node()


def _plotted_topics() -> list[str]:
    """Return the field paths (``/topic/field``) the shipped rqt perspective plots."""
    plugins = json.loads(PERSPECTIVE.read_text(encoding='utf-8'))['groups']['pluginmanager']
    return [path for name, group in plugins['groups'].items()
            if name.startswith('plugin__rqt_plot__')
            for path in ast.literal_eval(group['groups']['plugin']['keys']['topics']['repr'])]


def test_the_plotted_metric_topics_exist_before_any_training(context, tmp_path):
    """
    rqt_plot drops a perspective topic that does not exist yet: they exist from the start.

    A learner without workers never trains; its timers run for a while all the same.
    """
    learner = LearnerNode(parameter_overrides=[
        Parameter('log_dir', value=str(tmp_path)),
        Parameter('checkpoint.directory', value=str(tmp_path / 'checkpoints')),
        Parameter('sac.device', value='cpu'), Parameter('sac.hidden_sizes', value=[16, 16])])
    probe = rclpy.create_node('metric_topics_probe')
    plotted = _plotted_topics()
    assert plotted
    missing = plotted
    try:
        deadline = time.monotonic() + 5.0
        while missing and time.monotonic() < deadline:
            rclpy.spin_once(learner, timeout_sec=0.1)
            names = [name for name, types in probe.get_topic_names_and_types()
                     if 'std_msgs/msg/Float32' in types]
            missing = [path for path in plotted
                       if not any(path.startswith(name + '/') for name in names)]
        assert not missing, f'no topic yet for {missing}'
        assert learner.learner.updates == 0 and learner.learner.env_steps == 0
    finally:
        probe.destroy_node()
        learner.close()
        learner.destroy_node()


def test_the_learner_relabels_and_evaluates_with_the_workers_task_options(context, tmp_path):
    """``manipulation.*`` and ``sim.*`` reach the learner: HER computes the workers' rewards."""
    learner = LearnerNode(parameter_overrides=[
        Parameter('log_dir', value=str(tmp_path)),
        Parameter('checkpoint.directory', value=str(tmp_path / 'checkpoints')),
        Parameter('sac.device', value='cpu'), Parameter('sac.hidden_sizes', value=[16, 16]),
        Parameter('task.name', value='push'), Parameter('manipulation.reward', value='shaped'),
        Parameter('manipulation.success_distance', value=0.03),
        Parameter('sim.physics_hz', value=1000.0)])
    try:
        cfg = learner.eval_env_cfg
        assert cfg.task.name == 'push' and cfg.sim.physics_hz == 1000.0
        achieved, desired = np.zeros((1, 3)), np.array([[0.04, 0.0, 0.0]])
        # 4 cm: no success within 3 cm, and the shaped term lifts the -1 of a miss
        assert not learner.spec.goal.is_success(achieved, desired)[0]
        assert -1.0 < learner.spec.goal.compute_reward(achieved, desired, {})[0] < 0.0
    finally:
        learner.close()
        learner.destroy_node()


def _values(node) -> dict:
    """Return a node's parameters by name, arrays as lists."""
    return {name: list(p.value) if isinstance(p.value, (list, tuple, array.array)) else p.value
            for name, p in node.get_parameters_by_prefix('').items()}


def test_the_learner_records_its_parameters_and_a_learner_started_with_them_has_them(
        context, tmp_path):
    """``<run>/learner_parameters.yaml`` is the launch's parameters, ``--params-file`` ready."""
    first = LearnerNode(parameter_overrides=[
        Parameter('log_dir', value=str(tmp_path)), Parameter('sac.device', value='cpu'),
        Parameter('sac.hidden_sizes', value=[16, 16]), Parameter('task.name', value='push'),
        Parameter('manipulation.reward', value='shaped'), Parameter('eval_every', value=0)])
    try:
        path = first.run_folder.path / 'learner_parameters.yaml'
        given = _values(first)
    finally:
        first.close()
        first.destroy_node()
    record = yaml.safe_load(path.read_text(encoding='utf-8'))['learner']['ros__parameters']
    assert record['sac']['hidden_sizes'] == [16, 16] and record['task']['name'] == 'push'
    assert 'resume' not in record  # an action of that start, not a setting
    second = LearnerNode(cli_args=['--ros-args', '--params-file', str(path)])
    try:
        assert _values(second) == given and second.spec.name == 'push'
    finally:
        second.close()
        second.destroy_node()


def _learned(node: LearnerNode) -> None:
    """Make one update: the end of a run that learned nothing is not evaluated."""
    from conftest import transitions

    node.learner.ingest(transitions(300, np.random.default_rng(0), obs_dim=node.obs_dim,
                                    act_dim=node.act_dim))
    node.learner.train_step()


def test_learner_budget_end_scores_the_last_policy_and_judges_the_exported_one(
        context, tmp_path):
    """At the budget's end the ROS learner ends a run as the local runner does."""
    learner = LearnerNode(parameter_overrides=[
        Parameter('log_dir', value=str(tmp_path)), Parameter('eval_episodes', value=2),
        Parameter('final_eval_episodes', value=3),
        Parameter('checkpoint.directory', value=str(tmp_path / 'checkpoints')),
        Parameter('sac.device', value='cpu'), Parameter('sac.hidden_sizes', value=[16, 16])])
    try:
        assert learner.evaluator is not None and learner.evaluator.process.is_alive()
        _learned(learner)
        learner.save(evaluate=True)
    finally:
        learner.close()
        learner.destroy_node()
    assert not learner.evaluator.process.is_alive()
    run = tmp_path / 'latest'  # the learner's run folder under log_dir
    summary = json.loads((run / 'summary.json').read_text(encoding='utf-8'))
    assert summary['evaluations'] == 1          # the last policy, scored at the end
    assert summary['eval_episodes'] == 3        # the exported one, on held-out episodes
    assert 0.0 <= summary['eval_success_rate'] <= 1.0
    assert 'last_policy_success_rate' in summary and 'exported_policy_version' in summary
    assert (run / 'policy.pt').is_file()


def test_a_shutdown_during_the_final_evaluation_cuts_it_short(context, tmp_path):
    """Ctrl-C while the budget's end evaluates: the node waits an episode, then saves once."""
    import threading

    learner = LearnerNode(parameter_overrides=[
        Parameter('log_dir', value=str(tmp_path)), Parameter('eval_episodes', value=100000),
        Parameter('final_eval_episodes', value=100000),
        Parameter('checkpoint.directory', value=str(tmp_path / 'checkpoints')),
        Parameter('sac.device', value='cpu'), Parameter('sac.hidden_sizes', value=[16, 16])])
    finish = threading.Thread(target=learner.save, kwargs={'evaluate': True})
    try:
        _learned(learner)
        finish.start()
        deadline = time.monotonic() + 120
        while not list(tmp_path.rglob('ckpt_*.pt')):  # written before the evaluation
            assert time.monotonic() < deadline, 'no final checkpoint'
            time.sleep(0.1)
    finally:
        learner.close()  # waits for that save, which the stop request cuts short
        learner.destroy_node()
    assert not finish.is_alive()
    summary = json.loads((tmp_path / 'latest' / 'summary.json').read_text(encoding='utf-8'))
    # The summary of the cut evaluation: close() did not save a second time over it.
    assert summary['final_evaluation'].startswith('cut short: stopped after '), summary
    assert 'eval_success_rate' not in summary
    assert (tmp_path / 'latest' / 'policy.pt').is_file()


def test_a_resumed_learner_keeps_its_best_snapshots_and_counts_versions_on(context, tmp_path):
    """``resume:=true`` takes back the evaluator's record, as ``async-rl-train --resume``."""
    import dataclasses

    from async_rl_ros.core.learning.evaluation import EpisodeStats

    params = [Parameter('log_dir', value=str(tmp_path)), Parameter('eval_every', value=0),
              Parameter('checkpoint.directory', value=str(tmp_path / 'checkpoints')),
              Parameter('sac.device', value='cpu'), Parameter('sac.hidden_sizes', value=[16, 16])]
    first = LearnerNode(parameter_overrides=params)
    try:
        first.learner.policy_version = 12
        state = dataclasses.replace(first.learner.policy_state(evaluated=True), version=12)
        first.loop.record_evaluation(state, EpisodeStats(episodes=20, successes=17), 0)
        first.save()  # a shutdown: checkpoint, policy, summary
    finally:
        first.close()
        first.destroy_node()
    second = LearnerNode(parameter_overrides=[*params, Parameter('resume', value=True)])
    try:
        assert [(s.state.version, s.stats.successes) for s in second.loop.evaluations] == [
            (12, 17)]
        # The shards start from the checkpoint's version: the next commit is 13, not 1.
        assert second.committer.version == 12
    finally:
        second.close()
        second.destroy_node()


def test_a_line_logged_after_shutdown_goes_to_stderr_not_to_a_dead_rosout(capfd):
    """The learner's last lines after Ctrl-C: on stderr, without rcl's rosout complaint."""
    from async_rl_ros.ros.node_utils import log_late

    own = rclpy.Context()
    rclpy.init(context=own)
    node = rclpy.create_node('late_logger', context=own)
    try:
        log_late(node, 'while up')
        own.shutdown()
        log_late(node, 'policy exported to here', 'error')
        err = capfd.readouterr().err
        assert '[ERROR] [late_logger]: policy exported to here' in err
        assert 'rosout' not in err
    finally:
        node.destroy_node()
