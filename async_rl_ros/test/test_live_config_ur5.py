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
Run-time changes and start poses on the ur5 backend, against the UR controller double.

The real ``ur_rtde`` client talks to the double on loopback; the assertions read the joint
velocities the double's arm actually ran.
"""

from async_rl_ros.envs.reach_env import UR5ReachEnv
from async_rl_ros.envs.reach_task import OBS_SLICES
from async_rl_ros.envs.ur5_kinematics import fk_position
import numpy as np
import pytest

pytest.importorskip('rtde_control', reason='needs ur-rtde==1.6.5 (requirements.txt)')

from ur_double.backend import Run  # noqa: E402 -- after the skip check

PUSH = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 1.0])  # the last joint turns the flange in place


def clean_step(env: UR5ReachEnv) -> np.ndarray:
    """
    Step until one step runs as commanded.

    On a starved machine the backend may interrupt a step (a stale state; the double's
    watchdog stopping a client that did not write in time) and recover: those steps are
    skipped, as these tests are about the speed of the steps that run.
    """
    causes = []
    for _ in range(20):
        obs, _, _, _, info = env.step(PUSH)
        if info.get('interrupted') is None:
            return obs
        causes.append(info['interrupted'])
    raise AssertionError(f'no uninterrupted step in 20: {causes}')


def settle(env: UR5ReachEnv, speed: float) -> np.ndarray:
    """
    Step until the pushed joint turns at ``speed`` (rad/s); fail if it never does.

    How many steps the ramp takes depends on how the double's process was scheduled, so the
    test waits for the speed itself rather than counting steps.
    """
    seen = []
    for _ in range(200):
        obs = clean_step(env)
        seen.append(float(obs[OBS_SLICES['qd']][5]))
        if seen[-1] == pytest.approx(speed, abs=1e-6):
            return obs
    raise AssertionError(f'the joint never turned at {speed} rad/s; last speeds {seen[-5:]}')


def test_speed_scaling_tightens_at_once_and_loosens_next_episode():
    run = Run()  # speed_scaling 0.5, joint actions
    try:
        env, double, live = run.env, run.double, run.cfg
        env.reset(seed=0)
        full = 0.5 * 3.14  # action_scale * max_joint_speed (rad/s) before speed_scaling
        settle(env, full * 0.5)
        live = live.replace(**{'rtde.speed_scaling': 0.2})  # as SectionParameters does
        assert env.apply_config(live).now == ('rtde.speed_scaling',)
        # The very next command asks for the tighter speed (what the arm reached by the end
        # of that step depends on the double's clock), and the arm then holds it.
        clean_step(env)
        assert double.state()['target'][5] == pytest.approx(full * 0.2, abs=1e-6)
        settle(env, full * 0.2)
        live = live.replace(**{'rtde.speed_scaling': 0.4})
        assert env.apply_config(live).next_episode == ('rtde.speed_scaling',)
        clean_step(env)
        assert double.state()['target'][5] == pytest.approx(full * 0.2, abs=1e-6)
        env.reset(seed=1)
        settle(env, full * 0.4)
        assert double.state()['max_speed'] <= full * 0.5 + 1e-9
    finally:
        run.close()


def test_sampled_starts_in_a_tight_box_are_never_refused():
    # A fifth of plain home_q +- 0.1 rad draws would put the flange above this box.
    run = Run(**{'safety.workspace_high': [-0.15, 0.35, 0.47], 'task.home_noise': 0.1,
                 'rtde.speed_scaling': 1.0})
    try:
        env, double = run.env, run.double
        rng = np.random.default_rng(0)
        for seed in range(15):
            env.reset(seed=seed)  # the ur5 backend refuses a start outside the box
            q = np.array(double.state()['q'])
            assert env.safety.pose_ok(q)
            for _ in range(3):
                env.step(rng.uniform(-1.0, 1.0, 6))
        assert env.safety.violation(fk_position(double.state()['q'])) <= 1e-6
    finally:
        run.close()
