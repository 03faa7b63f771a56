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
The ur5 backend on a controller double, for the backend tests: a run, its config, stepping.

Each :class:`Run` starts its own double (on a free loopback address) and an env on it, and
records every observation for :meth:`Run.assert_safe`.
"""

from async_rl_ros.core.config import EnvWorkerConfig
from async_rl_ros.envs.reach_env import UR5ReachEnv
from async_rl_ros.envs.reach_task import OBS_SLICES
from async_rl_ros.envs.ur5_kinematics import fk_position
from async_rl_ros.envs.ur5_rtde import UR5RTDE
import numpy as np
from ur_double.harness import DoubleProcess

__all__ = ['PUSH', 'COOLDOWN', 'make_cfg', 'Run', 'drive', 'expected_speed']

PUSH = np.array([0.6, 0.0, 0.0, 0.0, 0.0, 0.0])   # joint 0 at 0.6 * 0.5 * 3.14 rad/s
COOLDOWN = 0.3  # s: the double's protective-stop cool-down in these tests


def make_cfg(ip, **overrides):
    flat = {'backend': 'ur5', 'rtde.robot_ip': ip, 'rtde.speed_scaling': 0.5,
            'rtde.protective_stop_cooldown_s': COOLDOWN, 'rtde.reconnect_initial_s': 0.1,
            'rtde.reconnect_max_s': 0.4, 'task.home_noise': 0.02,
            # 500 ms: a busy CI machine must not trip it by accident (default 10 Hz)
            'rtde.watchdog_min_hz': 2.0,
            # no real-time priority for the test process (the loop tests ask for it themselves)
            'rtde.rt_priority': 0}
    flat.update(overrides)
    return EnvWorkerConfig().replace(**flat)


class Run:
    """A double plus an env on it; records every observation for the safety check."""

    def __init__(self, series='e', gate=None, **overrides):
        self.double = DoubleProcess(series=series, cooldown=COOLDOWN)
        try:
            # joint actions: PUSH and expected_speed() speak joints (one test drives the flange)
            self.cfg = make_cfg(self.double.ip, **{'task.action': 'joint', **overrides})
            backend = UR5RTDE(self.cfg, gate=gate)
            self.env = UR5ReachEnv(self.cfg, backend=backend)
        except BaseException:
            self.double.close()
            raise
        self.backend = backend
        self.observations = []

    def reset(self, **options):
        obs, info = self.env.reset(seed=0, options=options or None)
        self.observations.append(obs)
        return obs, info

    def step(self, action=PUSH):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.observations.append(obs)
        return obs, truncated, info

    def moving(self):
        return self.double.state()['speed'] > 0.05

    def assert_safe(self):
        """Zero safety violations: flange in the box, joints and speeds within limits."""
        safety = self.env.safety
        margin = self.cfg.safety.workspace_margin
        for obs in self.observations:
            q = obs[OBS_SLICES['q']]
            assert safety.violation(tuple(obs[OBS_SLICES['ee_pos']])) <= margin + 1e-6
            assert safety.violation(fk_position(q)) <= margin + 1e-6
            assert np.all(np.abs(obs[OBS_SLICES['qd']]) <= np.array(safety.vmax) + 1e-6)
        state = self.double.state()
        assert state['max_speed'] <= min(self.cfg.safety.max_joint_speed) + 1e-9
        assert safety.violation(fk_position(state['q'])) <= margin + 1e-6

    def close(self):
        try:
            self.env.close()
        finally:
            self.double.close()


def drive(run, n):
    """
    Step until ``n`` steps in a row ran as commanded; return the last step's result.

    Only 'stale controller state' may interrupt: on a starved CI machine the double can miss
    its data deadline, and holding that step is the supervisor's job, not a failure.
    """
    clean = 0
    for _ in range(n + 30):
        out = run.step()
        reason = out[2].get('interrupted')
        assert reason in (None, 'stale controller state') and out[1] == bool(reason), out[2]
        clean = 0 if reason else clean + 1
        if clean == n:
            return out
    raise AssertionError(f'no {n} uninterrupted steps in a row')


def expected_speed(cfg, action):
    return action * cfg.task.action_scale * np.array(cfg.safety.max_joint_speed) * \
        cfg.rtde.speed_scaling
