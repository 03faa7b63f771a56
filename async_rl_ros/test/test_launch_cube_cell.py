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
launch_testing (skipped without ROS 2 or ur_rtde): ``task:=push`` on a physical arm.

``train.launch.py robot:=ur5 task:=push`` against the controller double (arm and gripper),
with this test's node standing in for the camera: it publishes the cube's
``geometry_msgs/PoseStamped`` on ``/cube_pose``. The preflight checks the gripper, worker 0
drives the arm and the gripper while the poses come, counts a pose in a foreign frame, holds
still while the camera is silent and steps again when it is back; every process exits
cleanly. Run after ``colcon build`` with the workspace sourced (``make ros-test``).
"""

import atexit
import os

os.environ.setdefault('ROS_DOMAIN_ID', '64')
os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
if os.environ.get('ROS_DISTRO') == 'humble':  # Jazzy warns that it is deprecated
    os.environ.setdefault('ROS_LOCALHOST_ONLY', '1')

import pathlib  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

import pytest  # noqa: E402

launch_testing = pytest.importorskip('launch_testing')
rclpy = pytest.importorskip('rclpy')
pytest.importorskip('async_rl_ros_interfaces.msg')
pytest.importorskip('rtde_control', reason='needs ur-rtde==1.6.5 (requirements.txt)')

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from async_rl_ros.envs.robotiq import RobotiqGripper  # noqa: E402, I100 -- after importorskip
from async_rl_ros.ros import qos, topics  # noqa: E402
from async_rl_ros_interfaces.msg import TransitionBatch, WorkerStatus  # noqa: E402
from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from geometry_msgs.msg import PoseStamped  # noqa: E402
from launch import LaunchDescription  # noqa: E402
from launch.actions import IncludeLaunchDescription  # noqa: E402
from launch.launch_description_sources import PythonLaunchDescriptionSource  # noqa: E402
import launch_testing.actions  # noqa: E402
import launch_testing.asserts  # noqa: E402
from ur_double.harness import DoubleProcess  # noqa: E402
import yaml  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
LAUNCH = ROOT / 'launch' / 'train.launch.py'
CONFIG = ROOT / 'config' / 'train.yaml'
IN_BOX = (-0.5, -0.1, 0.05)   # the middle of the cube's start box
LOOP = '/worker_0/env_worker: control loop'   # the arm worker's /diagnostics status


def _config(directory: str) -> str:
    """Write the shipped config with a small learner and a double-friendly arm."""
    tree = yaml.safe_load(CONFIG.read_text(encoding='utf-8'))
    learner = tree['learner']['ros__parameters']
    learner.update(learning_starts=256, warmup_steps=256, eval_every=100000, eval_episodes=1,
                   final_eval_episodes=1)
    learner['sac']['hidden_sizes'] = [32, 32]
    learner['replay']['capacity'] = 20000
    learner['batch'].update(initial_batch=64, min_batch=32)
    learner['checkpoint']['interval_steps'] = 0
    worker = tree['env_worker']['ros__parameters']
    worker.setdefault('rtde', {}).update(rt_priority=0, watchdog_min_hz=2.0, speed_scaling=0.5)
    transport = tree['ros_transport']['ros__parameters']
    transport['transition_batch'] = 16
    transport['parameter_server'].update(num_shards=1, replicas=1)
    path = pathlib.Path(directory) / 'train.yaml'
    path.write_text(yaml.safe_dump(tree), encoding='utf-8')
    return str(path)


@pytest.mark.launch_test
def generate_test_description():
    directory = tempfile.mkdtemp(prefix='async_rl_cube_cell_test_')
    atexit.register(shutil.rmtree, directory, True)  # after the post-shutdown tests
    double = DoubleProcess(cooldown=0.3)
    atexit.register(double.close)
    with RobotiqGripper(double.ip, timeout_s=10.0) as gripper:
        gripper.activate()   # as a person does on the teach pendant: the preflight checks it
    train = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(str(LAUNCH)),
        launch_arguments={'robot': 'ur5', 'robot_ip': double.ip, 'task': 'push',
                          'num_sim_workers': '0', 'device': 'cpu', 'log_dir': directory,
                          'config': _config(directory)}.items())
    return LaunchDescription([train, launch_testing.actions.ReadyToTest()]), {
        'double': double}


class TestCubeCell(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        rclpy.init()
        cls.node = rclpy.create_node('camera_stand_in')
        cls.batches = 0
        cls.status = []
        cls.loop = {}
        cls.camera_on = True
        cls.frame = 'base'
        cls.camera = cls.node.create_publisher(PoseStamped, '/cube_pose', qos.OBJECT_POSE)
        cls.node.create_timer(1.0 / 30.0, cls._publish_pose)
        cls.node.create_subscription(TransitionBatch, f'/worker_0/{topics.TRANSITIONS}',
                                     cls._count_batch, qos.TRANSITIONS)
        cls.node.create_subscription(WorkerStatus, topics.WORKER_STATUS, cls.status.append,
                                     qos.STATUS)
        cls.node.create_subscription(DiagnosticArray, topics.DIAGNOSTICS, cls._diagnostics,
                                     qos.DIAGNOSTICS)

    @classmethod
    def tearDownClass(cls):
        cls.node.destroy_node()
        rclpy.try_shutdown()

    @classmethod
    def _publish_pose(cls):
        if not cls.camera_on:
            return
        msg = PoseStamped()
        msg.header.stamp = cls.node.get_clock().now().to_msg()
        msg.header.frame_id = cls.frame
        msg.pose.position.x, msg.pose.position.y, msg.pose.position.z = IN_BOX
        msg.pose.orientation.w = 1.0
        cls.camera.publish(msg)

    @classmethod
    def _count_batch(cls, msg):
        cls.batches += 1

    @classmethod
    def _diagnostics(cls, msg):
        for status in msg.status:
            if status.name == LOOP:
                cls.loop = {kv.key: kv.value for kv in status.values}

    def _spin_until(self, predicate, timeout_s):
        deadline = time.monotonic() + timeout_s   # a give-up bound, not a measured time
        while time.monotonic() < deadline:
            rclpy.spin_once(self.node, timeout_sec=0.05)
            if predicate():
                return True
        return False

    def _worker_steps(self):
        return [s.steps for s in self.status if s.worker_id == 0]

    def test_the_arm_acts_on_the_camera_and_holds_without_it(self):
        self.assertTrue(self._spin_until(lambda: self.batches >= 3, 300),
                        f'no transitions from worker 0: {self.loop}')
        self.assertTrue(self._spin_until(
            lambda: int(self.loop.get('object_pose_received', 0)) > 30, 120), self.loop)
        # A pose in the camera's own frame is refused and counted, never used.
        type(self).frame = 'camera'
        self.assertTrue(self._spin_until(
            lambda: int(self.loop.get('object_pose_refused_frame', 0)) > 0, 60), self.loop)
        type(self).frame = 'base'
        # The camera goes silent: the worker holds (its step count stops moving).
        type(self).camera_on = False

        def stalled():
            steps = self._worker_steps()
            return len(steps) >= 3 and steps[-1] == steps[-2] == steps[-3]

        self.assertTrue(self._spin_until(stalled, 120), self._worker_steps()[-5:])
        held_at = self._worker_steps()[-1]
        type(self).camera_on = True
        self.assertTrue(self._spin_until(lambda: self._worker_steps()[-1] > held_at, 120),
                        'worker 0 does not step again once the camera is back')
        self.assertTrue(self._spin_until(
            lambda: int(self.loop.get('interrupted_policy_gate', 0)) >= 1, 60), self.loop)


@launch_testing.post_shutdown_test()
class TestShutdown(unittest.TestCase):

    def test_every_process_exits_cleanly(self, proc_info, proc_output, double):
        try:
            launch_testing.asserts.assertExitCodes(proc_info)
            self.assertLess(double.state()['speed'], 1e-6)   # the arm was stopped
        finally:
            double.close()
