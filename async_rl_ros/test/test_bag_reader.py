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

"""Warm start from a rosbag2 recording: a bag written with rosbags is read back (no ROS)."""

import pathlib

from async_rl_ros.core.weights.codec import CodecError
from async_rl_ros.ros import bag_reader
import numpy as np
import pytest

rosbags = pytest.importorskip('rosbags')

from rosbags.rosbag2 import Writer  # noqa: E402 -- only once rosbags is known to exist

MSG_DIR = pathlib.Path(__file__).resolve().parents[2] / 'async_rl_ros_interfaces' / 'msg'


def _message(store, worker, n, rng, obs_dim=21, count=None):
    cls = store.types[bag_reader.TRANSITION_TYPE]
    header = store.types['std_msgs/msg/Header'](
        stamp=store.types['builtin_interfaces/msg/Time'](sec=1, nanosec=2), frame_id='')
    return cls(header=header, worker_id=worker, source='sim', count=n if count is None else count,
               obs_dim=obs_dim, act_dim=6,
               policy_version=np.arange(n, dtype=np.int64),
               observations=rng.normal(size=n * obs_dim).astype(np.float32),
               actions=rng.uniform(-1, 1, n * 6).astype(np.float32),
               rewards=rng.normal(size=n).astype(np.float32),
               next_observations=rng.normal(size=n * obs_dim).astype(np.float32),
               terminated=(rng.random(n) < 0.5).astype(np.uint8),
               truncated=np.zeros(n, np.uint8))


def _write(path, messages, store):
    with Writer(path, version=8) as writer:
        connections = {}
        for topic, msg in messages:
            if topic not in connections:
                connections[topic] = writer.add_connection(
                    topic, bag_reader.TRANSITION_TYPE, typestore=store)
            writer.write(connections[topic], 1,
                         store.serialize_cdr(msg, bag_reader.TRANSITION_TYPE))


def test_recorded_batches_come_back_as_learner_batches(tmp_path):
    store = bag_reader.typestore_with_interfaces(MSG_DIR)
    rng = np.random.default_rng(0)
    sent = [('/worker_0/transitions', _message(store, 0, 4, rng)),
            ('/worker_1/transitions', _message(store, 1, 3, rng))]
    _write(tmp_path / 'bag', sent, store)
    batches = list(bag_reader.read_transition_bag(tmp_path / 'bag', obs_dim=21, act_dim=6,
                                                  msg_dir=MSG_DIR))
    assert [len(b['reward']) for b in batches] == [4, 3]
    for (_, msg), batch in zip(sent, batches):
        np.testing.assert_array_equal(batch['obs'].reshape(-1), msg.observations)
        np.testing.assert_array_equal(batch['terminated'], msg.terminated.astype(bool))
        np.testing.assert_array_equal(batch['worker_id'], msg.worker_id)
        np.testing.assert_array_equal(batch['policy_version'], msg.policy_version)


def test_malformed_recorded_batches_are_counted_or_raised(tmp_path):
    store = bag_reader.typestore_with_interfaces(MSG_DIR)
    rng = np.random.default_rng(1)
    _write(tmp_path / 'bag', [('/t', _message(store, 0, 4, rng, count=5)),
                              ('/t', _message(store, 0, 2, rng))], store)
    rejected = {}
    batches = list(bag_reader.read_transition_bag(tmp_path / 'bag', msg_dir=MSG_DIR,
                                                  rejected=rejected))
    assert len(batches) == 1 and rejected == {'shape': 1}
    with pytest.raises(CodecError):
        list(bag_reader.read_transition_bag(tmp_path / 'bag', msg_dir=MSG_DIR))
