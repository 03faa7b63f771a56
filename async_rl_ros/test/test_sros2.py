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
With SROS2 (skipped without rclpy, sros2 or the DDS security plugins): who may send weights.

``tools/sros2_keystore.sh`` makes a keystore in a temporary folder; real processes on this
machine then talk on ``/weights/shard_0`` (std_msgs/String), with ``ROS_SECURITY_ENABLE=true``
and ``ROS_SECURITY_STRATEGY=Enforce`` where they are secured: a subscriber in the worker's
enclave hears a publisher in the shard's enclave, and nothing from a publisher without the
keystore or from one with the keystore but the worker's or the learner's role. Every wait is
for an event (a line a process prints), with a generous bound after which the test gives up.
This file is also the program of those processes (``python3 test_sros2.py listen|talk``).
"""

import os
import pathlib
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time

os.environ.setdefault('ROS_DOMAIN_ID', '65')
os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
if os.environ.get('ROS_DISTRO') == 'humble':  # Jazzy warns that it is deprecated
    os.environ.setdefault('ROS_LOCALHOST_ONLY', '1')

TOPIC = '/weights/shard_0'
ENCLAVE = '/async_rl_ros/{}'
GIVE_UP_S = 90.0  # s a wait for a line gives up after (security handshakes on a busy host)
MORE = 20  # shard messages the secured worker must hear after a stranger is on the wire
SECURITY = ('ROS_SECURITY_ENABLE', 'ROS_SECURITY_STRATEGY', 'ROS_SECURITY_KEYSTORE',
            'ROS_SECURITY_ENCLAVE_OVERRIDE')


def _child(mode: str, label: str) -> int:
    """Run a listener (print every message) or a talker (publish ``label <n>``)."""
    import rclpy
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from std_msgs.msg import String

    rclpy.init(args=sys.argv)
    node = rclpy.create_node(f'sros2_{mode}_{label}')
    qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
    if mode == 'listen':
        node.create_subscription(String, TOPIC, lambda msg: print(msg.data, flush=True), qos)
        print('ready', flush=True)
        rclpy.spin(node)
        return 0
    try:
        pub = node.create_publisher(String, TOPIC, qos)
    except Exception as exc:  # noqa: B902 -- what access control answers: reported
        print('refused', type(exc).__name__, str(exc).splitlines()[0], flush=True)
        return 3
    print('publishing', flush=True)
    count = 0
    while rclpy.ok():
        pub.publish(String(data=f'{label} {count}'))
        count += 1
        rclpy.spin_once(node, timeout_sec=0.1)
    return 0


if __name__ == '__main__':
    signal.signal(signal.SIGINT, lambda *_: os._exit(0))
    sys.exit(_child(sys.argv[1], sys.argv[2]))

import pytest  # noqa: E402, I100 -- the test's imports, not the child's

rclpy = pytest.importorskip('rclpy')
pytest.importorskip('sros2')
pytest.importorskip('std_msgs.msg')

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _script() -> pathlib.Path:
    """Return tools/sros2_keystore.sh of the checkout (ros_test.sh names it: ASYNC_RL_REPO)."""
    for repo in (ROOT.parent, os.environ.get('ASYNC_RL_REPO')):
        if repo and (pathlib.Path(repo) / 'tools' / 'sros2_keystore.sh').is_file():
            return pathlib.Path(repo) / 'tools' / 'sros2_keystore.sh'
    pytest.skip('tools/sros2_keystore.sh not found (set ASYNC_RL_REPO to the checkout)')


def _security_plugins() -> bool:
    """Return whether Cyclone DDS's access control plugin is installed (the default RMW)."""
    from rclpy.utilities import get_rmw_implementation_identifier

    if get_rmw_implementation_identifier() != 'rmw_cyclonedds_cpp':
        pytest.skip('written for Cyclone DDS (RMW_IMPLEMENTATION=rmw_cyclonedds_cpp)')
    folders = os.environ.get('LD_LIBRARY_PATH', '').split(os.pathsep) + [
        os.path.join(prefix, 'lib')
        for prefix in os.environ.get('AMENT_PREFIX_PATH', '').split(os.pathsep)]
    return any(pathlib.Path(folder, 'libdds_security_ac.so').exists()
               for folder in folders if folder)


class Process:
    """A child process of this file whose printed lines are read by a thread."""

    def __init__(self, mode: str, label: str, keystore=None, role=None):
        env = {k: v for k, v in os.environ.items() if k not in SECURITY}
        cmd = [sys.executable, __file__, mode, label]
        if keystore is not None:
            env.update(ROS_SECURITY_ENABLE='true', ROS_SECURITY_STRATEGY='Enforce',
                       ROS_SECURITY_KEYSTORE=str(keystore))
            cmd += ['--ros-args', '--enclave', ENCLAVE.format(role)]
        self.label = label
        self.lines: list[str] = []
        self._new = queue.Queue()
        self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self._new.put(line.rstrip('\n'))
        self._new.put(None)  # the process ended

    def wait_for(self, predicate, what: str) -> str:
        """Return the first new line that satisfies ``predicate``; fail after GIVE_UP_S."""
        deadline = time.monotonic() + GIVE_UP_S
        while True:
            try:
                line = self._new.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                line = None
            if line is None:
                raise AssertionError(f'{self.label}: no {what} (exit status '
                                     f'{self.proc.poll()}); output: {self.lines[-20:]}')
            self.lines.append(line)
            if predicate(line):
                return line

    def heard(self, label: str) -> list[str]:
        """Return the lines with messages of the publisher ``label`` read so far."""
        return [line for line in self.lines if line.startswith(label + ' ')]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope='module')
def keystore(tmp_path_factory):
    if not _security_plugins():
        pytest.skip('no DDS security plugins (libdds_security_ac.so): Cyclone DDS was built '
                    'without ENABLE_SECURITY')
    path = tmp_path_factory.mktemp('sros2') / 'keystore'
    env = {k: v for k, v in os.environ.items() if k not in SECURITY}
    out = subprocess.run(['bash', str(_script()), str(path)], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    for role in ('learner', 'shard', 'worker', 'policy_runner', 'monitor'):
        assert (path / 'enclaves' / 'async_rl_ros' / role / 'permissions.p7s').is_file()
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope='module')
def fleet(keystore):
    """Yield a secured worker listening and a secured shard publishing weights."""
    started = []

    def start(*args, **kwargs):
        started.append(Process(*args, **kwargs))
        return started[-1]

    worker = start('listen', 'worker', keystore, 'worker')
    worker.wait_for(lambda line: line == 'ready', 'subscription')
    shard = start('talk', 'shard', keystore, 'shard')
    yield worker, shard, start
    for process in reversed(started):
        process.stop()


def _hear_more_shard_messages(worker: Process) -> None:
    """Wait until the worker hears MORE further shard messages: it had every chance."""
    for _ in range(MORE):
        worker.wait_for(lambda line: line.startswith('shard '), 'more shard messages')


def test_keystore_has_an_enclave_per_role_signed_for_this_domain(keystore):
    for role in ('learner', 'shard', 'worker', 'policy_runner', 'camera', 'monitor'):
        text = (keystore / 'enclaves' / 'async_rl_ros' / role / 'permissions.xml').read_text()
        assert f'<id>{os.environ["ROS_DOMAIN_ID"]}</id>' in text, role
        assert ('rt/weights/shard_*' in text.split('</publish>')[0]) == (role == 'shard')
        assert ('rt/worker_*/transitions' in text.split('</publish>')[0]) == (
            role == 'worker')


def test_secured_shard_weights_reach_a_secured_worker(fleet):
    worker, shard, _ = fleet
    shard.wait_for(lambda line: line == 'publishing', 'publisher')
    worker.wait_for(lambda line: line.startswith('shard '), 'message from the shard')


def test_publisher_without_the_keystore_is_not_heard(fleet):
    worker, _, start = fleet
    worker.wait_for(lambda line: line.startswith('shard '), 'message from the shard')
    stranger = start('talk', 'stranger')
    witness = start('listen', 'witness')  # unsecured too: proves the stranger is on the wire
    stranger.wait_for(lambda line: line == 'publishing', 'publisher')
    witness.wait_for(lambda line: line.startswith('stranger '), 'message from the stranger')
    _hear_more_shard_messages(worker)
    assert worker.heard('stranger') == []
    assert witness.heard('shard') == []  # and the secured weights are not readable


@pytest.mark.parametrize('role', ['worker', 'learner'])
def test_keystore_with_the_wrong_role_cannot_publish_weights(fleet, keystore, role):
    worker, _, start = fleet
    label = f'rogue_{role}'
    rogue = start('talk', label, keystore, role)
    answer = rogue.wait_for(lambda line: line.startswith(('refused', 'publishing')),
                            'answer to the publisher')
    _hear_more_shard_messages(worker)
    assert worker.heard(label) == []
    assert answer.startswith('refused'), answer  # access control refused the publisher
