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
launch_testing (skipped without ROS 2, sros2 or Cyclone's security plugins): a secured run.

``tools/sros2_keystore.sh`` makes a keystore, and ``train.launch.py security:=true`` runs one
simulated worker, the learner and one shard, each in its enclave with access control enforced.
A probe process reads the run in the monitor enclave: the worker acts with weights the shard
sent (``weights_accepted`` and ``policy_version`` rise, none rejected) and every process exits
cleanly. That
strangers and wrong roles are refused is ``test_sros2.py``'s part.
"""

import atexit
import os

os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
if os.environ.get('ROS_DISTRO') == 'humble':  # Jazzy warns that it is deprecated
    os.environ.setdefault('ROS_LOCALHOST_ONLY', '1')

import pathlib  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

import pytest  # noqa: E402

launch_testing = pytest.importorskip('launch_testing')
rclpy = pytest.importorskip('rclpy')
pytest.importorskip('sros2')
pytest.importorskip('async_rl_ros_interfaces.msg')

from launch import LaunchDescription  # noqa: E402, I100 -- after importorskip
from launch.actions import IncludeLaunchDescription  # noqa: E402
from launch.launch_description_sources import PythonLaunchDescriptionSource  # noqa: E402
import launch_testing.actions  # noqa: E402
import launch_testing.asserts  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
LAUNCH = ROOT / 'launch' / 'train.launch.py'
MONITOR = '/async_rl_ros/monitor'


def _keystore_script() -> pathlib.Path:
    """Return tools/sros2_keystore.sh of the checkout (ros_test.sh names it: ASYNC_RL_REPO)."""
    for repo in (ROOT.parent, os.environ.get('ASYNC_RL_REPO')):
        if repo and (pathlib.Path(repo) / 'tools' / 'sros2_keystore.sh').is_file():
            return pathlib.Path(repo) / 'tools' / 'sros2_keystore.sh'
    pytest.skip('tools/sros2_keystore.sh not found (set ASYNC_RL_REPO to the checkout)')


@pytest.mark.launch_test
def generate_test_description():
    # A domain of its own: Cyclone DDS refuses, in one process, a secured node on a domain the
    # earlier (unsecured) tests of this pytest run already joined. The keystore is signed for
    # it, and the launched processes inherit it.
    os.environ['ROS_DOMAIN_ID'] = str((int(os.environ.get('ROS_DOMAIN_ID', '0')) + 24) % 100)
    directory = tempfile.mkdtemp(prefix='async_rl_secure_test_')
    atexit.register(shutil.rmtree, directory, True)  # after the post-shutdown tests
    keystore = str(pathlib.Path(directory) / 'keystore')
    made = subprocess.run(['bash', str(_keystore_script()), keystore], capture_output=True,
                          text=True, timeout=300)
    if made.returncode != 0:
        pytest.skip(f'no keystore: {made.stderr.strip()[-500:]}')
    train = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(str(LAUNCH)),
        launch_arguments={'security': 'true', 'keystore': keystore, 'num_workers': '1',
                          'num_param_shards': '1', 'replicas': '1', 'device': 'cpu',
                          'log_dir': directory}.items())
    return LaunchDescription([train, launch_testing.actions.ReadyToTest()]), {
        'keystore': keystore}


#: The probe: a node in the monitor enclave that prints each status of worker 0.
PROBE = """
import rclpy
from async_rl_ros.ros import qos, topics
from async_rl_ros_interfaces.msg import WorkerStatus
rclpy.init()
node = rclpy.create_node('secure_launch_probe')
node.create_subscription(WorkerStatus, topics.WORKER_STATUS, lambda s: print(
    s.worker_id, s.weights_accepted, s.weights_rejected, s.policy_version, flush=True),
    qos.STATUS)
rclpy.spin(node)
"""


class TestSecuredRun(unittest.TestCase):

    def test_the_worker_acts_with_weights_the_shard_sent(self, keystore):
        env = dict(os.environ, ROS_SECURITY_ENABLE='true', ROS_SECURITY_STRATEGY='Enforce',
                   ROS_SECURITY_KEYSTORE=keystore, ROS_SECURITY_ENCLAVE_OVERRIDE=MONITOR)
        probe = subprocess.Popen([sys.executable, '-c', PROBE], env=env, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        seen = []
        try:
            give_up = time.monotonic() + 600   # a bound on a hang, not a measured time
            for line in probe.stdout:
                seen.append(line.strip())
                fields = line.split()
                if len(fields) == 4 and fields[0] == '0' and int(fields[1]) > 0 \
                        and int(fields[2]) == 0 and int(fields[3]) >= 1:
                    break
                self.assertLess(time.monotonic(), give_up, seen[-5:])
            else:
                self.fail(f'the probe ended: {seen[-5:]}')
        finally:
            probe.kill()
            probe.wait()


@launch_testing.post_shutdown_test()
class TestShutdown(unittest.TestCase):

    def test_every_process_exits_cleanly(self, proc_info):
        launch_testing.asserts.assertExitCodes(proc_info)
