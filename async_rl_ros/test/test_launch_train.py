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
launch_testing (skipped without ROS 2): the whole training graph on this machine.

``train.launch.py`` with two simulated workers, the learner and two parameter-server shards,
on a small configuration: transitions flow from both workers, the weight version rises, the
workers act with the new weights, a killed worker is respawned (and brought back to active
by the launch file), ``/diagnostics`` reports every worker and shard, the learner's
evaluator scores snapshots (``eval/success_rate`` topic), the exported policy is an evaluated
one, and every process exits cleanly on shutdown. Run after ``colcon build`` with the
workspace sourced, e.g. ``launch_test test/test_launch_train.py`` or ``colcon test
--packages-select async_rl_ros``.
"""

import atexit
import json
import os

os.environ.setdefault('ROS_DOMAIN_ID', '62')
os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
if os.environ.get('ROS_DISTRO') == 'humble':  # Jazzy warns that it is deprecated
    os.environ.setdefault('ROS_LOCALHOST_ONLY', '1')

import pathlib  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

import psutil  # noqa: E402
import pytest  # noqa: E402

launch_testing = pytest.importorskip('launch_testing')
rclpy = pytest.importorskip('rclpy')
pytest.importorskip('async_rl_ros_interfaces.msg')

from async_rl_ros.ros import qos, topics  # noqa: E402, I100 -- after importorskip
from async_rl_ros_interfaces.msg import PolicyWeights, TransitionBatch, WorkerStatus  # noqa
from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from launch import LaunchDescription  # noqa: E402
from launch.actions import IncludeLaunchDescription  # noqa: E402
from launch.launch_description_sources import PythonLaunchDescriptionSource  # noqa: E402
import launch_testing.actions  # noqa: E402
import launch_testing.asserts  # noqa: E402
from std_msgs.msg import Float32  # noqa: E402
import yaml  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
LAUNCH = ROOT / 'launch' / 'train.launch.py'
CONFIG = ROOT / 'config' / 'train.yaml'


def _small_config(directory: str) -> str:
    """Write the shipped config with a small, fast learner; return its path."""
    tree = yaml.safe_load(CONFIG.read_text(encoding='utf-8'))
    learner = tree['learner']['ros__parameters']
    learner.update(learning_starts=256, warmup_steps=256, eval_every=300, eval_episodes=2,
                   final_eval_episodes=2)
    learner['sac']['hidden_sizes'] = [32, 32]
    learner['replay']['capacity'] = 50000
    learner['batch'].update(initial_batch=64, min_batch=32)
    learner['checkpoint']['interval_steps'] = 0
    transport = tree['ros_transport']['ros__parameters']
    transport['transition_batch'] = 32
    transport['parameter_server'].update(commit_every=4, num_shards=2, replicas=1)
    path = pathlib.Path(directory) / 'train.yaml'
    path.write_text(yaml.safe_dump(tree), encoding='utf-8')
    return str(path)


@pytest.mark.launch_test
def generate_test_description():
    directory = tempfile.mkdtemp(prefix='async_rl_launch_test_')
    atexit.register(shutil.rmtree, directory, True)  # after the post-shutdown tests
    train = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(str(LAUNCH)),
        launch_arguments={'num_workers': '2', 'num_param_shards': '2', 'replicas': '1',
                          'device': 'cpu', 'log_dir': directory,
                          'config': _small_config(directory)}.items())
    return LaunchDescription([train, launch_testing.actions.ReadyToTest()]), {
        'log_dir': pathlib.Path(directory)}


def _worker_pids(worker_id: int) -> list[int]:
    """Return the pids of this test's env_worker processes in namespace /worker_<id>."""
    pids = []
    for child in psutil.Process().children(recursive=True):  # not another launch's workers
        try:
            args = child.cmdline()
        except psutil.Error:
            continue
        if any(a.endswith('/env_worker') for a in args) and \
                f'__ns:=/worker_{worker_id}' in args and child.status() != psutil.STATUS_ZOMBIE:
            pids.append(child.pid)
    return pids


class TestTraining(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        rclpy.init()
        cls.node = rclpy.create_node('launch_test_probe')
        cls.batches = {0: 0, 1: 0}
        cls.versions = []
        cls.status = {}
        cls.diagnostics = set()
        cls.evaluated = []
        for worker in (0, 1):
            cls.node.create_subscription(
                TransitionBatch, f'/worker_{worker}/{topics.TRANSITIONS}',
                lambda msg, w=worker: cls.batches.__setitem__(w, cls.batches[w] + 1),
                qos.TRANSITIONS)
        cls.node.create_subscription(PolicyWeights, topics.weights_topic(0),
                                     lambda msg: cls.versions.append(msg.version), qos.WEIGHTS)
        cls.node.create_subscription(WorkerStatus, topics.WORKER_STATUS,
                                     lambda msg: cls.status.__setitem__(msg.worker_id, msg),
                                     qos.STATUS)
        cls.node.create_subscription(
            Float32, topics.metric_topic('eval/success_rate'),
            lambda msg: cls.evaluated.append(msg.data), qos.METRICS)
        cls.node.create_subscription(
            DiagnosticArray, topics.DIAGNOSTICS,
            lambda msg: cls.diagnostics.update(s.name for s in msg.status), qos.DIAGNOSTICS)

    @classmethod
    def tearDownClass(cls):
        cls.node.destroy_node()
        rclpy.try_shutdown()

    def _spin_until(self, predicate, timeout_s):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            rclpy.spin_once(self.node, timeout_sec=0.1)
            if predicate():
                return True
        return False

    def test_training_graph(self):
        self.assertTrue(self._spin_until(lambda: min(self.batches.values()) >= 3, 180),
                        f'transition batches seen: {self.batches}')
        self.assertTrue(self._spin_until(
            lambda: len(set(self.versions)) >= 3 and max(self.versions) >= 2, 600),
            f'weight versions seen: {sorted(set(self.versions))}')
        self.assertEqual(self.versions, sorted(self.versions))

        def acting_with_weights():
            return all(w in self.status and self.status[w].policy_version >= 1 for w in (0, 1))

        self.assertTrue(self._spin_until(acting_with_weights, 180),
                        f'worker status: {self.status}')
        self.assertTrue(self._spin_until(
            lambda: {'env_worker: worker_0', 'env_worker: worker_1',
                     'param_server: shard_0', 'param_server: shard_1',
                     'learner: training doctor', 'learner: ingest'} <= self.diagnostics, 60),
            f'diagnostics: {sorted(self.diagnostics)}')
        # The evaluator process scores snapshots while training goes on.
        self.assertTrue(self._spin_until(lambda: self.evaluated, 180), 'no eval/success_rate')
        self.assertTrue(all(0.0 <= rate <= 1.0 for rate in self.evaluated), self.evaluated)

        # Kill worker 1: the launch file respawns it and brings it back to active.
        pids = _worker_pids(1)
        self.assertEqual(len(pids), 1, pids)
        steps_before = self.status[1].steps
        os.kill(pids[0], signal.SIGKILL)
        self.assertTrue(self._spin_until(
            lambda: _worker_pids(1) not in ([], pids), 60), 'worker 1 was not respawned')

        def respawned_steps():
            status = self.status[1]
            return status.state == 'active' and 0 < status.steps < steps_before

        self.assertTrue(self._spin_until(respawned_steps, 180),
                        'the respawned worker 1 does not step')
        batches = self.batches[1]
        self.assertTrue(self._spin_until(lambda: self.batches[1] > batches + 2, 120))
        # The weights reached the workers as deltas on keyframes, and the respawned worker,
        # which lacked every base, assembled a policy from the shards' keyframe topics.
        self.assertGreater(self.status[0].weights_delta_packets, 0, self.status[0])
        self.assertTrue(self._spin_until(
            lambda: self.status[1].policies_received >= 1 and self.status[1].steps
            < steps_before and self.status[1].policy_version >= 1, 120), self.status[1])
        self.assertEqual(self.status[0].weights_rejected + self.status[1].weights_rejected, 0)


@launch_testing.post_shutdown_test()
class TestShutdown(unittest.TestCase):

    def test_the_exported_policy_is_an_evaluated_one(self, log_dir):
        summary = json.loads((log_dir / 'latest' / 'summary.json').read_text(encoding='utf-8'))
        self.assertGreaterEqual(summary['evaluations'], 1, summary)
        self.assertIn('exported_policy_version', summary)
        self.assertTrue((log_dir / 'latest' / 'policy.pt').is_file())

    def test_every_process_exits_cleanly(self, proc_info, proc_output):
        # SIGKILL (-9) is the test's own kill of worker 1; every other exit is clean.
        launch_testing.asserts.assertExitCodes(proc_info, allowable_exit_codes=[0, -9])
        # ... and quiet: no thread dies publishing into a context Ctrl-C already shut down.
        for output in proc_output:
            text = output.text.decode(errors='replace')
            for bad in ('Traceback', 'RCLError', 'FATAL'):
                assert bad not in text, f'{output.process_name}: {text[-2000:]}'
