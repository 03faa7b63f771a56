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
The cube tasks on a physical arm: the controller double with its gripper, a stand-in camera.

The camera is a thread that offers the cube's pose to the worker's board as a ROS 2 env
worker's subscription does. Checked: a reset holds the arm above its start pose until the cube
rests in its start box, then lowers it, and draws the target from where it lies; a stale pose
holds the arm and truncates the episode; the gripper action moves the double's fingers; a lost
gripper link holds the arm and reconnects; a cube never placed, a lost camera or a gripper
fault ask for a person by name. No assertion depends on how fast the machine is: waits follow
events, with a give-up bound.
"""

import sys
import threading
import time

from async_rl_ros.core.config import ConfigError
from async_rl_ros.core.errors import NeedsPerson
from async_rl_ros.envs.factory import build_env
from async_rl_ros.envs.manipulation_task import OBS_SLICES
from async_rl_ros.envs.object_pose import PoseBoard
from async_rl_ros.envs.real_cell import CLEAR_LIFT
from async_rl_ros.envs.ur5_kinematics import fk_position
from async_rl_ros.envs.ur5_urdf import FINGERTIP, STROKE
import numpy as np
import pytest

pytest.importorskip('rtde_control', reason='needs ur-rtde==1.6.5 (requirements.txt)')

from ur_double.backend import make_cfg  # noqa: E402 -- after the skip check
from ur_double.harness import DoubleProcess  # noqa: E402

IN_BOX = (-0.5, -0.1, 0.05)
OUT_OF_BOX = (-0.3, 0.3, 0.05)
GIVE_UP_S = 60.0   # turns a hang into a failure; never reached on a working machine


class Camera:
    """A stand-in camera: offers the cube's pose to the board every 10 ms until stopped."""

    def __init__(self, board, where):
        self.board, self.where = board, where
        self.running = threading.Event()
        self.running.set()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._closed.wait(0.01):
            if self.running.is_set():
                self.board.offer('base', self.where, (0.0, 0.0, 0.0, 1.0), time.time())

    def close(self):
        self._closed.set()
        self._thread.join()


@pytest.fixture(scope='module')
def double():
    proc = DoubleProcess(cooldown=0.3)
    yield proc
    proc.close()


@pytest.fixture
def cell(double):
    """Yield a function building the push env on the double, with its camera."""
    made = []

    def make(where=IN_BOX, **overrides):
        double.call('gripper_power_cycle')
        flat = {'task.name': 'push', 'cell.place_timeout_s': GIVE_UP_S}
        flat.update(overrides)
        cfg = make_cfg(double.ip, **flat)
        board = PoseBoard.from_config(cfg)
        camera = Camera(board, where)
        env, _ = build_env(cfg, object_pose=board)
        made.append((env, camera))
        return env, camera

    yield make
    for env, camera in made:
        camera.close()
        env.close()


def held_for(env, words):
    """Wait until the arm holds for a reason containing ``words``; return that reason."""
    give_up = time.monotonic() + GIVE_UP_S
    while time.monotonic() < give_up:
        for _, kind, detail in list(env.unwrapped.backend.arm.events):
            if kind == 'policy_gate' and words in detail:
                return detail
        time.sleep(0.01)
    raise AssertionError(f'the arm never held for {words!r}')


def in_thread(fn):
    box = {}

    def run():
        try:
            box['value'] = fn()
        except BaseException as exc:  # noqa: B902 -- handed to the test
            box['error'] = exc
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


def test_a_reset_holds_until_the_cube_rests_in_its_start_box(cell, double):
    env, camera = cell(where=OUT_OF_BOX)
    thread, box = in_thread(lambda: env.reset(seed=3))
    detail = held_for(env, 'outside its start box')
    assert 'x -0.300 y 0.300' in detail
    held = double.state()
    assert thread.is_alive() and held['speed'] < 1e-6
    camera.where = IN_BOX   # a person puts the cube back
    thread.join(GIVE_UP_S)
    obs, info = box['value']
    np.testing.assert_allclose(obs[OBS_SLICES['cube']], IN_BOX, atol=1e-6)
    # It waited above the start pose, out of the way of the hand, then came down to it.
    start = np.array(fk_position(obs[OBS_SLICES['q']], FINGERTIP))
    waited = np.array(fk_position(held['q'], FINGERTIP))
    assert waited[2] - start[2] == pytest.approx(CLEAR_LIFT, abs=0.005)
    np.testing.assert_allclose(waited[:2], start[:2], atol=0.005)
    np.testing.assert_allclose(double.state()['q'], obs[OBS_SLICES['q']], atol=1e-3)
    target = obs[OBS_SLICES['target']]
    assert np.linalg.norm(target - np.array(IN_BOX)) >= env.unwrapped.cfg.manipulation \
        .success_distance
    assert obs[OBS_SLICES['width']][0] == pytest.approx(STROKE, abs=1e-3)   # opened


def test_the_gripper_action_closes_and_opens_the_fingers(cell, double):
    env, _ = cell()
    env.reset(seed=0)
    width = None
    for _ in range(300):
        obs, _, _, truncated, info = env.step(np.array([0.0, 0.0, 0.0, -1.0]))
        assert not info.get('interrupted') or 'stale controller state' in info['interrupted']
        width = obs[OBS_SLICES['width']][0]
        if width < 0.002:
            break
    assert width < 0.002, width
    assert double.call('gripper')['requested'] >= 220
    for _ in range(300):
        obs, *_ = env.step(np.array([0.0, 0.0, 0.0, 1.0]))
        if obs[OBS_SLICES['width']][0] > STROKE - 0.002:
            break
    assert obs[OBS_SLICES['width']][0] > STROKE - 0.002


def test_a_stale_cube_pose_holds_the_arm_and_truncates_the_episode(cell, double):
    env, camera = cell()
    env.reset(seed=1)
    env.step(np.array([0.5, 0.0, 0.0, 1.0]))
    camera.running.clear()   # the camera stops

    def step_until_held():
        for _ in range(10000):
            out = env.step(np.array([0.5, 0.0, 0.0, 1.0]))
            if 'cube' in out[4].get('interrupted', ''):
                return out
        raise AssertionError('the arm never held for the stale pose')
    thread, box = in_thread(step_until_held)
    detail = held_for(env, 'object pose on /cube_pose is')
    assert 'limit 0.1 s' in detail
    double.wait_for(lambda s: s['speed'] < 1e-6, timeout=GIVE_UP_S)
    assert thread.is_alive()
    camera.running.set()
    thread.join(GIVE_UP_S)
    _, _, _, truncated, info = box['value']
    assert truncated and info['interrupted'].startswith('policy gate: cube: the object pose')


def test_a_lost_gripper_link_holds_the_arm_and_reconnects(cell, double):
    env, _ = cell()
    env.reset(seed=2)
    double.call('gripper_silent', 'true')   # answers stop: the link is lost

    def step_until_held():
        for _ in range(10000):
            out = env.step(np.array([0.5, 0.0, 0.0, -1.0]))
            if 'gripper' in out[4].get('interrupted', ''):
                return out
        raise AssertionError('the arm never held for the gripper')
    thread, box = in_thread(step_until_held)
    assert 'reconnecting, attempt' in held_for(env, 'gripper: link lost')
    double.wait_for(lambda s: s['speed'] < 1e-6, timeout=GIVE_UP_S)
    double.call('gripper_silent', 'false')
    thread.join(GIVE_UP_S)
    assert box['value'][3]   # truncated
    gripper = env.unwrapped.backend.gripper
    assert gripper.reason() is None and gripper.reconnects == 1
    assert env.unwrapped.backend.summary()['gripper']['reconnects'] == 1


def test_a_cube_never_put_back_asks_for_a_person_and_stops_the_arm(cell, double):
    env, _ = cell(where=OUT_OF_BOX, **{'cell.place_timeout_s': 1.0})
    with pytest.raises(NeedsPerson, match='put the cube in its start box: the cube is at'):
        env.reset(seed=4)
    assert double.state()['speed'] < 1e-6


def test_a_gripper_fault_asks_for_a_person_with_the_fault(cell, double):
    env, _ = cell()
    env.reset(seed=5)
    double.call('gripper_fault', 14)
    with pytest.raises(NeedsPerson, match='FLT 14.*overcurrent'):
        for _ in range(1000):
            env.step(np.array([0.0, 0.0, 0.0, -1.0]))
    assert double.state()['speed'] < 1e-6


def test_the_cube_tasks_on_a_physical_arm_need_the_pose_board(double):
    cfg = make_cfg(double.ip, **{'task.name': 'push'})
    with pytest.raises(ConfigError, match='cell.pose_topic'):
        build_env(cfg)


def test_the_local_runner_refuses_a_physical_cube_cell_in_one_line(tmp_path):
    import subprocess
    out = subprocess.run([sys.executable, '-m', 'async_rl_ros.local.cli', '--task', 'push',
                          '--steps', '100', '--set', 'backend=ur5',
                          '--set', f'learner.log_dir={tmp_path}'],
                         capture_output=True, text=True, timeout=GIVE_UP_S)
    assert out.returncode == 2, out.stderr
    assert 'Traceback' not in out.stderr
    assert 'cell.pose_topic' in out.stderr


def test_a_gripper_on_a_digital_output_follows_the_gripper_action(cell, double):
    env, _ = cell(**{'cell.gripper': 'digital_output', 'cell.gripper_output': 3})
    obs, _ = env.reset(seed=6)
    assert double.state()['digital_out'] & (1 << 3) == 0   # open at the reset
    assert obs[OBS_SLICES['width']][0] == pytest.approx(STROKE)
    obs, *_ = env.step(np.array([0.0, 0.0, 0.0, -1.0]))   # close
    assert double.state()['digital_out'] == 1 << 3
    assert obs[OBS_SLICES['width']][0] == 0.0
    obs, *_ = env.step(np.array([0.0, 0.0, 0.0, 0.5]))    # open
    assert double.state()['digital_out'] == 0
    assert env.unwrapped.backend.summary()['gripper'] == {'moves': 3, 'output': 3}
