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


"""The cube pose a physical cell acts on: every reading checked, counted, aged; the gate."""

import math

from async_rl_ros.core.config import EnvWorkerConfig
from async_rl_ros.envs.object_pose import PoseBoard, REFUSALS
from async_rl_ros.envs.rtde_supervisor import PolicyGate
import numpy as np
import pytest


class Clock:

    def __init__(self, t=1000.0):
        self.t = t

    def __call__(self):
        return self.t


@pytest.fixture
def board():
    clock = Clock()
    b = PoseBoard.from_config(EnvWorkerConfig(), clock=clock)
    b.test_clock = clock
    return b


UPRIGHT = (0.0, 0.0, 0.0, 1.0)


@pytest.mark.parametrize('reading, reason', [
    (('camera', (-0.5, 0.0, 0.05), UPRIGHT, 999.9), 'frame'),
    (('base', (-0.5, math.nan, 0.05), UPRIGHT, 999.9), 'non-finite'),
    (('base', (-0.5, 0.0, 0.05), UPRIGHT, math.inf), 'non-finite'),
    (('base', (-0.5, 0.0, 0.05), (0.0, 0.0, 0.0, 0.5), 999.9), 'quaternion'),
    (('base', (-0.5, 0.0, 5.0), UPRIGHT, 999.9), 'outside the cell'),
    (('base', (-3.0, 0.0, 0.05), UPRIGHT, 999.9), 'outside the cell'),
    (('base', (-0.5, 0.0, 0.05), UPRIGHT, 1001.0), 'future stamp'),
])
def test_every_refused_reading_is_counted_by_its_reason_and_changes_nothing(board, reading,
                                                                            reason):
    assert board.offer('base', (-0.5, 0.0, 0.05), UPRIGHT, 999.0) is None
    kept = board.latest()
    assert board.offer(*reading) == reason
    assert board.latest() is kept
    assert board.summary() == {'received': 2, 'refused': {reason: 1}}
    assert set(board.refused) <= set(REFUSALS)


def test_a_reading_older_than_the_newest_is_out_of_order(board):
    assert board.offer('base', (-0.5, 0.0, 0.05), UPRIGHT, 999.5) is None
    assert board.offer('base', (-0.4, 0.0, 0.05), UPRIGHT, 999.5) == 'out of order'
    assert board.offer('base', (-0.4, 0.0, 0.05), UPRIGHT, 999.4) == 'out of order'
    assert board.latest().position[0] == -0.5


def test_velocities_are_differences_of_the_two_newest_readings(board):
    assert board.offer('base', (-0.5, 0.0, 0.05), UPRIGHT, 999.0) is None
    first = board.latest()
    assert np.all(first.velocity == 0.0) and np.all(first.spin == 0.0)
    half = 0.05   # a turn of 0.1 rad about z in 0.1 s: 1 rad/s
    assert board.offer('base', (-0.49, 0.002, 0.05), (0.0, 0.0, math.sin(half),
                                                      math.cos(half)), 999.1) is None
    pose = board.latest()
    np.testing.assert_allclose(pose.velocity, [0.1, 0.02, 0.0], atol=1e-9)
    np.testing.assert_allclose(pose.spin, [0.0, 0.0, 1.0], atol=1e-6)


def test_a_quaternion_near_unit_is_normalized(board):
    assert board.offer('base', (-0.5, 0.0, 0.05), (0.0, 0.0, 0.0, 1.02), 999.0) is None
    assert np.linalg.norm(board.latest().quat) == pytest.approx(1.0)


def test_the_reason_to_hold_names_the_topic_and_the_age(board):
    assert board.reason() == 'no object pose yet on /cube_pose'
    board.offer('base', (-0.5, 0.0, 0.05), UPRIGHT, 999.95)
    assert board.reason() is None   # 0.05 s old, the limit is 0.1 s
    board.test_clock.t = 1000.5
    assert board.reason() == 'the object pose on /cube_pose is 0.55 s old (limit 0.1 s)'
    assert board.age() == pytest.approx(0.55)


def test_a_watched_input_closes_the_gate_with_its_name():
    why = {'now': None}
    gate = PolicyGate(max_policy_lag=4, heartbeat_timeout_s=math.inf)
    gate.watch('cube', lambda: why['now'])
    assert gate.reason() is None
    why['now'] = 'the object pose is 2 s old'
    assert gate.reason() == 'cube: the object pose is 2 s old'
    assert gate.wait_open(0.0) == 'cube: the object pose is 2 s old'
    why['now'] = None
    assert gate.wait_open(0.0) is None
