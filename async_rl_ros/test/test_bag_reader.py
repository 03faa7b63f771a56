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
Warm start from a rosbag2 recording (``ros/bag_reader.py``, the learner's warm start).

Without ROS 2: the path checks, and the reader's bookkeeping (topic filter, counts, rejected
batches, a read that stops half-way) against a stand-in for ``rosbag2_py`` and ``rclpy``'s
deserializer. With ROS 2 (skipped otherwise): ``ros2 bag record`` of live topics in the
distro's default storage, every storage plugin the distro has, unusable recordings, and the
learner node warm-starting from a bag.
"""

import json
import os
import pathlib
import pickle
import shutil
import signal
import subprocess
import sys
import time
import types

from async_rl_ros.ros import bag_reader
from async_rl_ros.ros.bag_reader import BagError, BagStats
import numpy as np
import pytest

OBS, ACT = 21, 6
QOS_OVERRIDES = pathlib.Path(__file__).resolve().parents[1] / 'config' / 'bag_qos.yaml'


def _fields(worker, n, rng, obs_dim=OBS, count=None, version=3):
    """Return the fields of a TransitionBatch (``count`` may lie: a malformed batch)."""
    return {'worker_id': worker, 'source': 'sim', 'count': n if count is None else count,
            'obs_dim': obs_dim, 'act_dim': ACT,
            'policy_version': np.full(n, version, np.int64),
            'observations': rng.normal(size=n * obs_dim).astype(np.float32),
            'actions': rng.uniform(-1, 1, n * ACT).astype(np.float32),
            'rewards': rng.normal(size=n).astype(np.float32),
            'next_observations': rng.normal(size=n * obs_dim).astype(np.float32),
            'terminated': (rng.random(n) < 0.5).astype(np.uint8),
            'truncated': np.zeros(n, np.uint8)}


def _same(batch, fields):
    np.testing.assert_array_equal(batch['obs'].reshape(-1), fields['observations'])
    np.testing.assert_array_equal(batch['action'].reshape(-1), fields['actions'])
    np.testing.assert_array_equal(batch['reward'], fields['rewards'])
    np.testing.assert_array_equal(batch['terminated'], fields['terminated'].astype(bool))
    np.testing.assert_array_equal(batch['policy_version'], fields['policy_version'])
    assert (batch['worker_id'] == fields['worker_id']).all()


# ====================================================================== without ROS 2
def test_a_missing_or_unfinished_recording_is_named_before_rosbag2_is_needed(tmp_path):
    with pytest.raises(BagError, match='does not exist'):
        bag_reader.check_bag(tmp_path / 'nope')
    (tmp_path / 'killed').mkdir()  # what a recorder killed with SIGKILL can leave
    with pytest.raises(BagError, match=r'no metadata\.yaml.*ros2 bag reindex'):
        list(bag_reader.read_transition_bag(tmp_path / 'killed'))


class _FakeReader:
    """``rosbag2_py.SequentialReader`` over the messages of a :class:`_FakeRosbag2`."""

    def __init__(self, bag, kind):
        self.bag, self.kind, self.rest, self.read = bag, kind, [], 0

    def open(self, storage, converter):  # noqa: A003 -- rosbag2_py's name
        self.bag.opened.append((self.kind, storage.storage_id))

    def set_filter(self, flt):
        self.rest = [m for m in self.bag.messages if m[0] in flt.topics]

    def has_next(self):
        return bool(self.rest)

    def read_next(self):
        if self.bag.fail_after is not None and self.read >= self.bag.fail_after:
            raise RuntimeError('bad chunk')
        topic, _, data = self.rest.pop(0)
        self.read += 1
        return topic, data, 0


class _FakeRosbag2:
    """Stand-in for ``rosbag2_py``: metadata and messages of one recording."""

    def __init__(self, messages, compressed='', fail_after=None):
        self.messages, self.compressed, self.fail_after = messages, compressed, fail_after
        self.topics = {}
        for topic, kind, _ in messages:
            self.topics.setdefault(topic, kind)
        self.opened = []

    def module(self):
        metadata = types.SimpleNamespace(
            storage_identifier='mcap', compression_format=self.compressed,
            topics_with_message_count=[
                types.SimpleNamespace(topic_metadata=types.SimpleNamespace(name=n, type=t))
                for n, t in self.topics.items()])
        return types.SimpleNamespace(
            Info=lambda: types.SimpleNamespace(read_metadata=lambda uri, storage: metadata),
            SequentialReader=lambda: _FakeReader(self, 'plain'),
            SequentialCompressionReader=lambda: _FakeReader(self, 'compressed'),
            StorageOptions=lambda uri, storage_id: types.SimpleNamespace(
                uri=uri, storage_id=storage_id),
            ConverterOptions=lambda *a: None,
            StorageFilter=lambda topics: types.SimpleNamespace(topics=topics))


@pytest.fixture
def fake_ros(monkeypatch, tmp_path):
    """Install a fake rosbag2 recording; return a function that sets its messages."""
    bag = tmp_path / 'bag'
    bag.mkdir()
    (bag / 'metadata.yaml').write_text('rosbag2_bagfile_information: {}\n')

    def deserialize(data, cls):
        return types.SimpleNamespace(**pickle.loads(data))

    interfaces = types.ModuleType('async_rl_ros_interfaces')
    interfaces.msg = types.SimpleNamespace(TransitionBatch=object)
    monkeypatch.setitem(sys.modules, 'async_rl_ros_interfaces', interfaces)
    monkeypatch.setitem(sys.modules, 'async_rl_ros_interfaces.msg', interfaces.msg)
    monkeypatch.setitem(sys.modules, 'rclpy', types.ModuleType('rclpy'))
    monkeypatch.setitem(sys.modules, 'rclpy.serialization',
                        types.SimpleNamespace(deserialize_message=deserialize))

    def install(messages, **kwargs):
        fake = _FakeRosbag2([(t, k, d if isinstance(d, bytes) else pickle.dumps(d))
                             for t, k, d in messages], **kwargs)
        monkeypatch.setitem(sys.modules, 'rosbag2_py', fake.module())
        return bag, fake

    return install


def test_reader_keeps_transition_topics_counts_and_skips_malformed_batches(fake_ros):
    rng = np.random.default_rng(0)
    kind = bag_reader.TRANSITION_TYPE
    good = [_fields(0, 4, rng), _fields(1, 3, rng), _fields(0, 2, rng)]
    bag, fake = fake_ros([('/worker_0/transitions', kind, good[0]),
                          ('/chatter', 'std_msgs/msg/String', b'hello'),
                          ('/worker_1/transitions', kind, good[1]),
                          ('/worker_1/transitions', kind, _fields(1, 4, rng, count=5)),
                          ('/worker_0/transitions', kind, _fields(0, 2, rng, obs_dim=7)),
                          ('/worker_0/transitions', kind, b'\x00 not a message'),
                          ('/worker_0/transitions', kind, good[2])])
    stats = BagStats()
    batches = list(bag_reader.read_transition_bag(bag, OBS, ACT, stats))
    assert [len(b['reward']) for b in batches] == [4, 3, 2]
    for batch, fields in zip(batches, good):
        _same(batch, fields)
    assert stats == BagStats(storage='mcap', messages=6, transitions=9,
                             topics=('/worker_0/transitions', '/worker_1/transitions'),
                             rejected={'shape': 2, 'format': 1})
    assert fake.opened == [('plain', 'mcap')]  # the recording's own storage plugin


def test_a_compressed_recording_opens_with_the_compression_reader(fake_ros):
    bag, fake = fake_ros([('/t', bag_reader.TRANSITION_TYPE,
                           _fields(0, 2, np.random.default_rng(1)))], compressed='zstd')
    assert len(list(bag_reader.read_transition_bag(bag))) == 1
    assert fake.opened == [('compressed', 'mcap')]


def test_unusable_recordings_raise_one_line_errors(fake_ros):
    bag, _ = fake_ros([('/chatter', 'std_msgs/msg/String', b'hello')])
    with pytest.raises(BagError, match=r'no .*TransitionBatch topic \(topics: /chatter '):
        list(bag_reader.read_transition_bag(bag))
    rng = np.random.default_rng(2)
    bag, _ = fake_ros([('/t', bag_reader.TRANSITION_TYPE, _fields(0, 2, rng))] * 3,
                      fail_after=2)
    stats = BagStats()
    with pytest.raises(BagError, match='stopped after 2 messages: bad chunk'):
        list(bag_reader.read_transition_bag(bag, stats=stats))
    assert stats.transitions == 4


# ====================================================================== with ROS 2
@pytest.fixture
def dds(monkeypatch):
    """Keep DDS on this host, on a domain of its own unless one is set."""
    monkeypatch.setenv('ROS_DOMAIN_ID', os.environ.get('ROS_DOMAIN_ID', '63'))
    if os.environ.get('ROS_DISTRO') == 'humble':
        monkeypatch.setenv('ROS_LOCALHOST_ONLY', '1')
    else:
        monkeypatch.setenv('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')


def _ros():
    """Skip without ROS 2; return (rclpy, rosbag2_py, TransitionBatch)."""
    rclpy = pytest.importorskip('rclpy')
    rosbag2_py = pytest.importorskip('rosbag2_py')
    msgs = pytest.importorskip('async_rl_ros_interfaces.msg')
    return rclpy, rosbag2_py, msgs.TransitionBatch


def _message(fields):
    from async_rl_ros_interfaces.msg import TransitionBatch

    msg = TransitionBatch()
    for name, value in fields.items():
        if isinstance(value, np.ndarray):  # Humble's classes take lists, not arrays
            value = value.tolist()
        setattr(msg, name, value)
    return msg


def _write(rosbag2_py, path, storage, messages):
    from rclpy.serialization import serialize_message

    writer = rosbag2_py.SequentialWriter()
    writer.open(rosbag2_py.StorageOptions(uri=str(path), storage_id=storage),
                rosbag2_py.ConverterOptions('cdr', 'cdr'))
    known = set()
    for i, (topic, kind, msg) in enumerate(messages):
        if topic not in known:
            info = {'name': topic, 'type': kind, 'serialization_format': 'cdr'}
            try:
                metadata = rosbag2_py.TopicMetadata(id=len(known), **info)
            except TypeError:  # Humble: no id
                metadata = rosbag2_py.TopicMetadata(**info)
            writer.create_topic(metadata)
            known.add(topic)
        writer.write(topic, serialize_message(msg), 1000 + i)
    del writer  # closes the recording (metadata.yaml)


def test_every_storage_plugin_of_this_distro_reads_back(tmp_path):
    rclpy, rosbag2_py, _ = _ros()
    from std_msgs.msg import String

    storages = sorted({'sqlite3', 'mcap'} & set(rosbag2_py.get_registered_writers()))
    assert rosbag2_py.get_default_storage_id() in storages
    rng = np.random.default_rng(3)
    for storage in storages:
        good = [_fields(0, 5, rng), _fields(1, 64, rng)]
        _write(rosbag2_py, tmp_path / storage, storage, [
            ('/worker_0/transitions', bag_reader.TRANSITION_TYPE, _message(good[0])),
            ('/chatter', 'std_msgs/msg/String', String(data='hi')),
            ('/worker_1/transitions', bag_reader.TRANSITION_TYPE,
             _message(_fields(1, 4, rng, count=3))),
            ('/worker_1/transitions', bag_reader.TRANSITION_TYPE, _message(good[1]))])
        stats = BagStats()
        batches = list(bag_reader.read_transition_bag(tmp_path / storage, OBS, ACT, stats))
        assert stats.storage == storage and stats.rejected == {'shape': 1}, storage
        assert (stats.messages, stats.transitions) == (3, 69), storage
        for batch, fields in zip(batches, good):
            _same(batch, fields)


def test_unusable_recordings_are_named_by_rosbag2(tmp_path):
    rclpy, rosbag2_py, _ = _ros()
    from std_msgs.msg import String

    _write(rosbag2_py, tmp_path / 'chatter', '', [('/chatter', 'std_msgs/msg/String',
                                                   String(data='hi'))])
    with pytest.raises(BagError, match=r'no .*TransitionBatch topic \(topics: /chatter '):
        bag_reader.check_bag(tmp_path / 'chatter')
    (tmp_path / 'garbage').mkdir()
    (tmp_path / 'garbage' / 'metadata.yaml').write_text('foo: [\n')
    with pytest.raises(BagError, match='rosbag2 cannot read'):
        bag_reader.check_bag(tmp_path / 'garbage')


def test_ros2_bag_record_of_live_topics_reads_back_whole(tmp_path, dds):
    """``ros2 bag record`` with the shipped QoS overrides misses no message of a burst."""
    rclpy, rosbag2_py, TransitionBatch = _ros()
    from async_rl_ros.ros import qos

    if shutil.which('ros2') is None:
        pytest.skip('no ros2 command')
    topics = ['/worker_0/transitions', '/worker_1/transitions']
    recorder = subprocess.Popen(
        ['ros2', 'bag', 'record', '-o', str(tmp_path / 'bag'), '-e', '/worker_.*/transitions',
         '--qos-profile-overrides-path', str(QOS_OVERRIDES)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True, env=dict(os.environ, PYTHONUNBUFFERED='1'))
    rclpy.init()
    rng = np.random.default_rng(4)
    sent = {topic: [] for topic in topics}
    try:
        node = rclpy.create_node('bag_record_probe')
        pubs = {topic: node.create_publisher(TransitionBatch, topic, qos.TRANSITIONS)
                for topic in topics}
        deadline = time.monotonic() + 30.0
        while any(p.get_subscription_count() == 0 for p in pubs.values()):
            assert time.monotonic() < deadline, 'the recorder never subscribed'
            assert recorder.poll() is None, recorder.stderr.read().decode()
            time.sleep(0.1)
        for i in range(150):  # bursts of 50 batches a topic (the queues hold 64)
            for worker, topic in enumerate(topics):
                fields = _fields(worker, 64, rng, version=i)
                sent[topic].append(fields)
                pubs[topic].publish(_message(fields))
            if i % 50 == 49:
                time.sleep(0.5)
        time.sleep(2.0)
        node.destroy_node()
    finally:
        rclpy.try_shutdown()
        os.killpg(recorder.pid, signal.SIGINT)  # Ctrl-C
        try:
            recorder.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(recorder.pid, signal.SIGKILL)
            raise
    stats = BagStats()
    batches = list(bag_reader.read_transition_bag(tmp_path / 'bag', OBS, ACT, stats))
    assert stats.storage == rosbag2_py.get_default_storage_id()
    assert (stats.messages, stats.transitions, stats.rejected) == (300, 300 * 64, {})
    assert stats.topics == tuple(topics)
    for worker, topic in enumerate(topics):
        mine = [b for b in batches if b['worker_id'][0] == worker]
        assert len(mine) == 150
        for batch, fields in zip(mine, sent[topic]):  # in order, none lost or repeated
            _same(batch, fields)


def test_learner_node_warm_starts_from_a_recording_or_refuses_it(tmp_path, dds):
    rclpy, rosbag2_py, _ = _ros()
    from async_rl_ros.core.config import ConfigError
    from async_rl_ros.ros.learner_node import LearnerNode
    from rclpy.parameter import Parameter

    rng = np.random.default_rng(5)
    _write(rosbag2_py, tmp_path / 'bag', '', [
        (f'/worker_{i % 2}/transitions', bag_reader.TRANSITION_TYPE,
         _message(_fields(i % 2, 64, rng))) for i in range(20)] + [
        ('/worker_0/transitions', bag_reader.TRANSITION_TYPE,
         _message(_fields(0, 64, rng, obs_dim=7)))])

    def learner(bag):  # the recording's fleet stepped joint velocities (6 action values)
        return LearnerNode(parameter_overrides=[
            Parameter('task.action', value='joint'),
            Parameter('transport.warm_start_bag', value=str(bag)),
            Parameter('log_dir', value=str(tmp_path / 'run')),
            Parameter('checkpoint.directory', value=str(tmp_path / 'run' / 'ckpt')),
            Parameter('learning_starts', value=1000), Parameter('warmup_steps', value=1000),
            Parameter('sac.device', value='cpu'), Parameter('sac.hidden_sizes', value=[16, 16]),
            Parameter('her.k', value=0)])

    rclpy.init()
    try:
        node = learner(tmp_path / 'bag')
        try:
            assert node.learner.recorded_steps == 1280 and node.learner.env_steps == 0
            assert len(node.learner.replay) == 1280 and node.learner.ready()
            assert node.warm_start['messages'] == 21
            assert node.warm_start['rejected_batches'] == 1
            deadline = time.monotonic() + 30.0
            while node.learner.updates == 0:  # updates begin without any worker
                assert time.monotonic() < deadline, 'no update after the warm start'
                time.sleep(0.05)
        finally:
            node.close()
            node.destroy_node()
        summary = json.loads((tmp_path / 'run' / 'latest' / 'summary.json').read_text())
        assert summary['warm_start']['transitions'] == 1280 and summary['env_steps'] == 0
        for bad in (tmp_path / 'nope', tmp_path / 'run'):
            with pytest.raises(ConfigError, match='transport.warm_start_bag'):
                learner(bad)
    finally:
        rclpy.try_shutdown()


def test_launch_with_an_unusable_recording_starts_nothing(tmp_path):
    try:
        from ament_index_python.packages import get_package_share_directory
        get_package_share_directory('async_rl_ros')
    except (ImportError, LookupError):
        pytest.skip('async_rl_ros is not installed in a sourced ROS 2 workspace')
    _ros()
    if shutil.which('ros2') is None:
        pytest.skip('no ros2 command')
    config = tmp_path / 'warm.yaml'
    shipped = QOS_OVERRIDES.with_name('train.yaml').read_text(encoding='utf-8')
    assert "warm_start_bag: ''" in shipped
    config.write_text(shipped.replace("warm_start_bag: ''",
                                      f"warm_start_bag: '{tmp_path / 'nope'}'"))
    env = dict(os.environ, ROS_DOMAIN_ID=os.environ.get('ROS_DOMAIN_ID', '63'))
    proc = subprocess.run(['ros2', 'launch', 'async_rl_ros', 'train.launch.py',
                           f'config:={config}', f'log_dir:={tmp_path}'],
                          capture_output=True, text=True, timeout=120, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert 'ros_transport.warm_start_bag' in out and 'nope does not exist' in out, out
    assert 'process started' not in out, out
