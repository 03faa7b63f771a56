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
Run-time configuration changes reach the commands: the whole path of ``ros2 param set``.

ROS cannot run here, so each test does what ``SectionParameters`` does with an accepted
change -- ``section.replace(**changed)`` (which validates) -- hands the result to
:meth:`UR5ReachEnv.apply_config`, as the env worker's ``on_change`` hook does, and checks the
joint velocities the safety filter passes to the (simulated) arm, not the stored values.
"""

from async_rl_ros.core.config import (ConfigError, EnvWorkerConfig, LearnerConfig,
                                      RosTransportConfig, SafetyConfig)
from async_rl_ros.envs.factory import check_config
from async_rl_ros.envs.reach_env import UR5ReachEnv
from async_rl_ros.envs.safety import intersect_limits, SafetyFilter
from async_rl_ros.envs.ur5_kinematics import fk_position
import numpy as np
import pytest

TARGET = [-0.45, -0.1, 0.3]
#: The env tests below command joints, so they use joint actions.
JOINT = EnvWorkerConfig().replace(**{'task.action': 'joint'})
UP = np.array([0.0, -1.0, 0.0, 0.0, 0.0, 0.0])  # joint 2 backwards lifts the flange
WRIST = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 1.0])  # joint 6 turns the flange in place


def recording_env(cfg: EnvWorkerConfig) -> tuple[UR5ReachEnv, list[np.ndarray]]:
    """Return an env whose backend records every command (rad/s) it is given."""
    env = UR5ReachEnv(cfg)
    commands: list[np.ndarray] = []
    step = env.backend.step

    def record(qd):
        commands.append(np.array(qd, dtype=np.float64))
        return step(qd)

    env.backend.step = record
    return env, commands


def set_params(env: UR5ReachEnv, live: EnvWorkerConfig, **changed):
    """Do what SectionParameters + the env worker's on_change hook do with an accepted change."""
    updated = live.replace(**changed)
    return updated, env.apply_config(updated)


# ---------------------------------------------------------------------- the filter alone
def test_filter_tightens_at_once_and_loosens_at_the_episode_boundary():
    f = SafetyFilter(SafetyConfig(), 0.04)
    q = np.array([0.0, -1.5708, 1.5708, -1.5708, -1.5708, 0.0])
    slow = SafetyConfig().replace(max_joint_speed=[0.2] * 6)
    assert f.update(slow) == (True, False)
    assert f(q, [3.0] * 6)[0] == pytest.approx(0.2)
    assert f.update(SafetyConfig()) == (False, True)  # loosening waits
    f.reset()
    assert f(q, [3.0] * 6)[0] == pytest.approx(0.2)
    f.episode_boundary()
    assert f(q, [3.0] * 6)[0] == pytest.approx(0.32)  # now only the acceleration limit


def test_intersection_folds_margins_into_the_bounds():
    a = SafetyConfig().replace(workspace_margin=0.1)
    b = SafetyConfig().replace(workspace_high=[-0.15, 0.35, 0.5], workspace_margin=0.0)
    both = intersect_limits(a, b)
    assert both.workspace_margin == 0.0
    np.testing.assert_allclose(both.workspace_high, [-0.25, 0.25, 0.5])
    np.testing.assert_allclose(both.workspace_low, [-0.7, -0.45, 0.13])


# ---------------------------------------------------------------------- through the env
def test_tightened_speed_limit_clips_the_very_next_command():
    live = JOINT.replace(**{'task.action_scale': 1.0, 'safety.max_joint_accel': 40.0})
    env, commands = recording_env(live)
    env.reset(seed=0, options={'target': TARGET})
    for _ in range(3):
        env.step(WRIST)
    assert commands[-1][5] == pytest.approx(3.14)
    live, change = set_params(env, live, **{'safety.max_joint_speed': [2.0] * 6})
    assert change.now == ('safety.max_joint_speed',) and change.next_episode == ()
    env.step(WRIST)
    assert commands[-1][5] == pytest.approx(2.0)
    env.close()


def test_tightened_speed_limit_brakes_at_the_acceleration_limit():
    live = JOINT.replace(**{'task.action_scale': 1.0})  # a * dt = 0.32 rad/s
    env, commands = recording_env(live)
    env.reset(seed=0, options={'target': TARGET})
    for _ in range(12):
        env.step(WRIST)
    assert commands[-1][5] == pytest.approx(3.14)
    set_params(env, live, **{'safety.max_joint_speed': [0.6] * 6})
    for _ in range(10):
        env.step(WRIST)
    speeds = [c[5] for c in commands[-10:]]
    # As fast down as the acceleration limit allows (the arm cannot stop at once), then held.
    np.testing.assert_allclose(speeds[:7], [3.14 - 0.32 * k for k in range(1, 8)], atol=1e-9)
    np.testing.assert_allclose(speeds[8:], 0.6)
    env.close()


def test_loosened_limits_wait_for_the_next_episode():
    live = JOINT.replace(**{'task.action_scale': 1.0, 'safety.max_joint_speed': [0.5] * 6})
    env, commands = recording_env(live)
    env.reset(seed=0, options={'target': TARGET})
    live, change = set_params(env, live, **{'safety.max_joint_speed': [3.0] * 6})
    assert change.now == () and change.next_episode == ('safety.max_joint_speed',)
    for _ in range(20):
        env.step(WRIST)
    assert max(c[5] for c in commands) == pytest.approx(0.5)
    env.reset(seed=1, options={'target': TARGET})
    for _ in range(20):
        env.step(WRIST)
    assert max(c[5] for c in commands[20:]) == pytest.approx(3.0)
    env.close()


def test_action_scale_tightens_at_once_and_loosens_next_episode():
    live = JOINT
    env, commands = recording_env(live)
    env.reset(seed=0, options={'target': TARGET})
    live, change = set_params(env, live, **{'task.action_scale': 0.1})
    assert change.now == ('task.action_scale',)
    env.step(UP)
    assert abs(commands[-1][1]) == pytest.approx(0.314)
    live, change = set_params(env, live, **{'task.action_scale': 0.5})
    assert change.next_episode == ('task.action_scale',)
    env.step(UP)
    assert abs(commands[-1][1]) == pytest.approx(0.314)
    env.reset(seed=0, options={'target': TARGET})
    env.step(UP)
    assert abs(commands[-1][1]) == pytest.approx(0.32)  # 1.57 wanted, acceleration-limited
    env.close()


def test_shrunk_workspace_box_stops_the_flange_at_the_new_face():
    live = JOINT.replace(**{'task.action_scale': 0.3})
    env, _ = recording_env(live)
    env.reset(seed=0, options={'target': TARGET, 'q': live.task.home_q})
    z0 = env.state.ee_pos[2]
    for _ in range(5):
        env.step(UP)
    assert env.state.ee_pos[2] > z0 + 0.01  # rising
    face = env.state.ee_pos[2] + 0.04
    live, change = set_params(env, live, **{'safety.workspace_high': [-0.15, 0.35, face]})
    assert change.now == ('safety.workspace_high',)
    heights = []
    for _ in range(60):
        _, _, _, _, info = env.step(UP)
        heights.append(env.state.ee_pos[2])
    margin = live.safety.workspace_margin
    assert max(heights) <= face - margin + 2e-3  # stopped at the new face (motor tracking)
    assert heights[-1] > face - margin - 0.01     # ... and not far below it
    assert abs(heights[-1] - heights[-2]) < 1e-3  # at rest
    assert 'workspace' in info['safety']
    env.close()


def test_control_rate_changes_the_period_and_episode_length_at_the_next_episode():
    live = JOINT
    env, _ = recording_env(live)
    env.reset(seed=0, options={'target': TARGET})
    live, change = set_params(env, live, **{'task.control_hz': 50.0})
    assert change.now == () and change.next_episode == ('task.control_hz',)
    env.step(np.zeros(6))
    assert env.backend.time == pytest.approx(0.04)  # this episode keeps its period
    env.reset(seed=0, options={'target': TARGET})
    truncated, steps = False, 0
    while not truncated:
        truncated = env.step(np.zeros(6))[3]
        steps += 1
    assert steps == 200 and env.backend.time == pytest.approx(4.0)
    assert env.safety.dt == pytest.approx(0.02)
    env.close()


def test_read_only_options_are_refused_and_declared():
    env = UR5ReachEnv()
    with pytest.raises(ConfigError, match='seed.*read-only'):
        env.apply_config(EnvWorkerConfig().replace(seed=5))
    env.close()
    read_only = {name for cls in (EnvWorkerConfig, LearnerConfig, RosTransportConfig)
                 for name, _, info, _ in cls.options() if info.read_only}
    assert {'backend', 'seed', 'sim.physics_hz', 'rtde.robot_ip', 'rtde.watchdog_min_hz',
            'replay.capacity', 'sac.actor_lr', 'parameter_server.num_shards',
            'codec.quantize', 'metrics_hz'} <= read_only
    assert not {'safety.max_joint_speed', 'task.control_hz', 'rtde.speed_scaling',
                'sac.gamma', 'worker_timeout_s', 'updates_per_step'} & read_only


# ---------------------------------------------------------------------- start poses
def tight_box() -> EnvWorkerConfig:
    return EnvWorkerConfig().replace(**{'safety.workspace_high': [-0.15, 0.35, 0.47]})


def test_every_sampled_start_lies_inside_a_tight_box():
    cfg = tight_box()
    env = UR5ReachEnv(cfg)
    home = np.array(cfg.task.home_q)
    rng = np.random.default_rng(0)
    plain = [home + rng.uniform(-0.05, 0.05, 6) for _ in range(200)]
    outside = sum(not env.safety.pose_ok(q) for q in plain)
    assert outside >= 5  # the box is tight enough that plain noise leaves it
    top = 0.47 - cfg.safety.workspace_margin
    for seed in range(200):
        env.reset(seed=seed)
        q = env.state.q
        assert env.safety.pose_ok(q)
        assert fk_position(q)[2] <= top
    env.close()


def test_home_outside_or_starts_that_rarely_fit_are_refused():
    with pytest.raises(ConfigError, match=r'^task.home_q = .*workspace') as err:
        check_config(EnvWorkerConfig().replace(**{'safety.workspace_high': [-0.15, 0.35, 0.43],
                                                  'task.target_high': [-0.3, 0.1, 0.42]}))
    assert '\n' not in str(err.value)
    slab = {'safety.workspace_low': [-0.8, -0.55, 0.40], 'task.target_low': [-0.6, -0.3, 0.42],
            'safety.workspace_high': [-0.15, 0.35, 0.47], 'task.target_high': [-0.3, 0.1, 0.45]}
    check_config(EnvWorkerConfig().replace(**slab, **{'task.home_noise': 0.1}))
    noisy = EnvWorkerConfig().replace(**slab, **{'task.home_noise': 0.3})  # no kinematics here
    with pytest.raises(ConfigError, match=r'^task.home_noise = 0.3 .*only \d+ do') as err:
        check_config(noisy)
    assert '\n' not in str(err.value)


def test_real_arm_starts_keep_the_reset_path_in_the_box():
    cfg = tight_box()
    env = UR5ReachEnv(cfg)
    home = np.array(cfg.task.home_q)
    q_far = home + np.array([0.26, -0.67, 0.45, 0.08, -0.27, 0.3])
    assert env.safety.pose_ok(q_far) and env.safety.path_ok(q_far, home)
    rng = np.random.default_rng(0)
    blocked = sum(not env.safety.path_ok(q_far, home + rng.uniform(-0.05, 0.05, 6))
                  for _ in range(100))
    assert blocked > 25  # many starts are not reachable in a straight line from q_far
    env.backend.teleports = False  # like the ur5 backend: a reset moves along a joint path
    starts = []
    for seed in range(20):
        env.reset(seed=seed, options={'q': q_far})
        env.reset(seed=seed)
        starts.append(env.state.q)
        assert env.safety.pose_ok(env.state.q) and env.safety.path_ok(q_far, env.state.q)
    assert len({tuple(np.round(q, 4)) for q in starts}) > 10  # still random starts
    env.close()
