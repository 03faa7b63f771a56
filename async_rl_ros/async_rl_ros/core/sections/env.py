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
Sections of the environment side: the task, safety limits, simulator and the physical UR5.

``EnvWorkerConfig`` (node ``env_worker``) gathers them and checks the rules that span them.
Import them from :mod:`async_rl_ros.core.config`.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import math
import re

from async_rl_ros.core.options import check_box, ConfigError, INT32_MAX, option, Section

_TWO_PI = 6.2832  # rad, 2 pi rounded up: UR joints turn +-360 deg


@dataclasses.dataclass
class TaskConfig(Section):
    """
    The task the workers step; at run time changes apply from the next episode.

    ``name`` picks the task plug-in (:mod:`async_rl_ros.envs.tasks`); the other options are
    those of the UR5 tasks, which a Gymnasium task (``gym:ID``) does not use: it brings its
    own, like ``rtde.*`` apply only to ``backend: ur5``. The control rate, episode length,
    action, home noise and ``terminate_on_success`` apply to every UR5 task; the home
    pose, target box, success distance and reward weights are the reach task's (the cube
    tasks read ``manipulation.*``).
    """

    name: str = option('reach', 'Task to learn: reach (the UR5 flange to a point), push or '
                       'pick_and_place (the UR5 and its gripper move a cube; a physical cell '
                       'under ROS 2 only, see cell.*), gym:ID (a '
                       'Gymnasium goal-conditioned env, simulation only, e.g. '
                       'gym:PandaPush-v3) or a task another package registers under the '
                       'async_rl_ros.tasks entry point group.', read_only=True)
    control_hz: float = option(25.0, 'RL control rate; one env step lasts 1/control_hz.',
                               unit='Hz', low=1.0, high=500.0)
    episode_seconds: float = option(4.0, 'Episode time limit; the episode is truncated after it.',
                                    unit='s', low=0.04, high=3600.0)
    action: str = option(
        'cartesian', 'What the arm part of an action commands: cartesian (a velocity of the '
        'tool point -- the flange in reach, the grasp point in the cube tasks -- turned into '
        "joint velocities by the arm's differential kinematics, the tool held in its home "
        'orientation) or joint (a velocity per joint).', choices=('cartesian', 'joint'),
        read_only=True)
    ee_speed: float = option(0.25, 'Tool point speed of a cartesian action 1.0.', unit='m/s',
                             low=0.0, high=1.0, low_open=True)
    action_scale: float = option(0.5, 'Fraction of the joint speed limit that a joint action 1.0 '
                                 'means; a cartesian action moves no joint faster.',
                                 low=0.0, high=1.0, low_open=True)
    home_q: list[float] = option(
        [0.0, -1.5708, 1.5708, -1.5708, -1.5708, 0.0],
        'Joint positions the arm returns to on reset (reach; the cube tasks start at '
        'manipulation.home_q).', unit='rad',
        low=-_TWO_PI, high=_TWO_PI, length=6)
    home_noise: float = option(0.05, 'Uniform noise added to each home joint position on reset.',
                               unit='rad', low=0.0, high=0.5)
    target_low: list[float] = option([-0.60, -0.30, 0.10],
                                     'Lower corner of the target box (base frame).',
                                     unit='m', low=-2.0, high=2.0, length=3)
    target_high: list[float] = option([-0.30, 0.10, 0.45],
                                      'Upper corner of the box targets are sampled in.',
                                      unit='m', low=-2.0, high=2.0, length=3)
    success_distance: float = option(0.02, 'Distance to the target that counts as success.',
                                     unit='m', low=0.0, high=1.0, low_open=True)
    distance_weight: float = option(1.0, 'Weight of the -distance reward term.',
                                    low=0.0, high=100.0)
    shaping_weight: float = option(1.0, 'Weight of the 0.5 * (1 - tanh(d / shaping_scale)) term.',
                                   low=0.0, high=100.0)
    shaping_scale: float = option(0.1, 'Length scale of the tanh shaping term.', unit='m',
                                  low=0.0, high=10.0, low_open=True)
    action_penalty: float = option(0.0, 'Weight of the -||action||^2 reward term.',
                                   low=0.0, high=100.0)
    terminate_on_success: bool = option(False, 'End the episode as soon as the task succeeds '
                                        '(UR5 tasks; a Gymnasium task keeps its own rule).')

    def check(self, source: str | None, prefix: str) -> None:
        """Check that the task is named and the target box is not empty."""
        if not self.name.strip() or self.name != self.name.strip():
            raise ConfigError(prefix + 'name', self.name, 'a task name without surrounding '
                              'spaces: reach, gym:ID or a registered task', source)
        check_box(self.target_low, self.target_high, prefix + 'target', source)

    @property
    def dt(self) -> float:
        """Control period (s)."""
        return 1.0 / self.control_hz

    @property
    def max_episode_steps(self) -> int:
        """Episode length in control steps."""
        return max(1, int(round(self.episode_seconds * self.control_hz)))


@dataclasses.dataclass
class SafetyConfig(Section):
    """Limits of every command; at run time a change tightens at once, loosens next episode."""

    joint_lower: list[float] = option([-2 * math.pi] * 6, 'Hard lower joint position limits.',
                                      unit='rad', low=-_TWO_PI, high=_TWO_PI, length=6)
    joint_upper: list[float] = option([2 * math.pi] * 6, 'Hard upper joint position limits.',
                                      unit='rad', low=-_TWO_PI, high=_TWO_PI, length=6)
    joint_margin: float = option(0.05, 'Distance kept from each joint limit.', unit='rad',
                                 low=0.0, high=1.0)
    max_joint_speed: list[float] = option([3.14] * 6, 'Joint speed limits.', unit='rad/s',
                                          low=0.0, high=3.15, low_open=True, length=6)
    max_joint_accel: float = option(8.0, 'Joint acceleration limit (change of the commanded '
                                    'velocity per second).', unit='rad/s^2',
                                    low=0.0, high=40.0, low_open=True)
    workspace_low: list[float] = option([-0.80, -0.55, 0.03],
                                        'Lower corner of the box the end effector must stay in.',
                                        unit='m', low=-2.0, high=2.0, length=3)
    workspace_high: list[float] = option([-0.15, 0.35, 0.75],
                                         'Upper corner of the end-effector box.',
                                         unit='m', low=-2.0, high=2.0, length=3)
    workspace_margin: float = option(0.01, 'Distance the filter keeps from the box faces.',
                                     unit='m', low=0.0, high=0.2)

    def check(self, source: str | None, prefix: str) -> None:
        """Check that the joint range and the workspace box are non-empty."""
        check_box(self.workspace_low, self.workspace_high, prefix + 'workspace', source)
        for i, (lo, hi) in enumerate(zip(self.joint_lower, self.joint_upper)):
            if hi - lo <= 2 * self.joint_margin:
                raise ConfigError(f'{prefix}joint_upper[{i}]', hi,
                                  f'> joint_lower[{i}] + 2 * joint_margin = '
                                  f'{lo + 2 * self.joint_margin:g}', source)


@dataclasses.dataclass
class ManipulationConfig(Section):
    """
    The tasks that move an object: ``push`` and ``pick_and_place`` (a gripper and a cube).

    Positions are in the base frame; the cube (5 cm) rests on a table whose top lies
    ``0.025`` m above the robot's mounting plane. Reach and Gymnasium tasks do not use it.
    """

    home_q: list[float] = option(
        [0.0017, -1.4272, 1.8683, -2.0119, -1.5708, 0.0017],
        'Joint positions the arm returns to on reset (task.home_noise added): the grasp point '
        '0.12 m above the mounting plane over the middle of the start box, the gripper '
        'pointing down: near enough the cube that exploring moves it (from the reach home, '
        '0.26 m away, random actions almost never do). Starts whose fingertips would not '
        'clear a cube are drawn again.',
        unit='rad', low=-_TWO_PI, high=_TWO_PI, length=6)
    object_low: list[float] = option([-0.60, -0.20], 'Lower corner (x, y) of the box the cube '
                                     'starts in.', unit='m', low=-2.0, high=2.0, length=2)
    object_high: list[float] = option([-0.42, -0.02], 'Upper corner (x, y) of the box the cube '
                                      'starts in.', unit='m', low=-2.0, high=2.0, length=2)
    goal_low: list[float] = option([-0.65, -0.25], 'Lower corner (x, y) of the box targets are '
                                   'drawn in.', unit='m', low=-2.0, high=2.0, length=2)
    goal_high: list[float] = option([-0.37, 0.03], 'Upper corner (x, y) of the box targets are '
                                    'drawn in.', unit='m', low=-2.0, high=2.0, length=2)
    goal_height: float = option(0.2, 'Highest pick_and_place target above the resting cube.',
                                unit='m', low=0.0, high=0.5)
    air_fraction: float = option(0.5, 'Share of pick_and_place targets above the table (the '
                                 'others lie on it).', low=0.0, high=1.0)
    success_distance: float = option(0.05, 'Distance of the cube to its target that counts as '
                                     'success (the Fetch and panda-gym convention).', unit='m',
                                     low=0.0, high=1.0, low_open=True)
    reward: str = option('sparse', 'sparse: -1 until the cube is within success_distance, '
                         "then 0; shaped: that plus 0.5 * (1 - tanh(d / 0.1)) of the cube's "
                         'distance d to the target.', choices=('sparse', 'shaped'))
    grip_force: float = option(40.0, 'Force the fingers close with (Robotiq 2F-85: 20-235 N).',
                               unit='N', low=20.0, high=235.0)
    grip_speed: float = option(0.1, 'Speed the gripper opens and closes at (2F-85: '
                               '0.02-0.15 m/s).', unit='m/s', low=0.02, high=0.15)

    def check(self, source: str | None, prefix: str) -> None:
        """Check that the start and goal boxes are not empty."""
        check_box(self.object_low, self.object_high, prefix + 'object', source)
        check_box(self.goal_low, self.goal_high, prefix + 'goal', source)


@dataclasses.dataclass
class CellConfig(Section):
    """
    The physical cube cell: a UR5 with a Robotiq 2F-85 and a cube seen by a camera.

    Used by ``push`` and ``pick_and_place`` on ``backend: ur5`` under ROS 2: the gripper is
    driven through the Robotiq URCap on ``rtde.robot_ip``, and the cube's pose arrives on
    ``pose_topic`` from outside (AprilTags, motion capture). Simulation does not use it.
    """

    pose_topic: str = option('/cube_pose', 'geometry_msgs/PoseStamped topic the cube pose '
                             'arrives on, in the frame pose_frame.', read_only=True)
    pose_frame: str = option('base', "frame_id a cube pose must carry: the robot's base frame "
                             '(no transform is applied); a pose in another frame is refused '
                             'and counted.', read_only=True)
    pose_max_age_s: float = option(0.1, 'Oldest cube pose the policy may act on; while the '
                                   'newest is older, the arm holds still.', unit='s',
                                   low=0.005, high=2.0)
    place_timeout_s: float = option(60.0, 'How long a reset waits for the cube to rest in its '
                                    'start box (manipulation.object_low/high) before asking a '
                                    'person to put it there.', unit='s', low=1.0, high=3600.0)
    gripper: str = option('robotiq', 'The gripper: robotiq (a 2F-85 through the Robotiq URCap '
                          'socket, with position feedback) or digital_output (any gripper a '
                          'standard digital output opens (low) and closes (high); no feedback: '
                          'the observed opening is the commanded one).',
                          choices=('robotiq', 'digital_output'), read_only=True)
    gripper_output: int = option(0, 'Standard digital output of a digital_output gripper.',
                                 low=0, high=7, read_only=True)
    gripper_port: int = option(63352, 'TCP port of the Robotiq URCap socket on the controller.',
                               low=1, high=65535, read_only=True)
    gripper_closed_count: int = option(227, 'Position count of the empty closed 2F-85 (close it '
                                       'and read GET POS; units differ a little).', low=200,
                                       high=255, read_only=True)


@dataclasses.dataclass
class SimConfig(Section):
    """PyBullet simulation of the UR5."""

    physics_hz: float = option(500.0, 'Physics rate (the e-Series controller runs at 500 Hz); '
                               'each control step runs round(physics_hz / control_hz) sub-steps.',
                               unit='Hz', low=25.0, high=2000.0, read_only=True)
    gui: bool = option(False, 'Open a window for a person to watch each env worker: the '
                       'PyBullet GUI of the UR5 tasks, render_mode human of a gym: task '
                       '(needs a display; evaluations stay headless).', read_only=True)
    real_time: bool = option(False, 'Pace the simulated arm to the wall clock (one control '
                             'period per step), as a physical arm delivers its transitions: '
                             'arm-time studies without an arm. An env rendered for a person '
                             '(render_mode human, async-rl-train --render) is always paced.')
    cube_in_gripper: float = option(0.0, 'Share of the training episodes of the cube tasks '
                                    'that start with the cube held between the closed fingers '
                                    'at the start pose, as in the pick-and-place experiments '
                                    'of Hindsight Experience Replay (Andrychowicz et al. '
                                    '2017): the learner sees a carried cube from the first '
                                    'episodes. Evaluations, a fixed policy and a physical arm '
                                    "start with the cube on the table; the workers' own "
                                    'episode statistics include these starts. Other tasks '
                                    '(reach, gym:) refuse a share above 0.', low=0.0,
                                    high=1.0)


_HOST_LABEL = re.compile(r'^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$')


def _is_address(text: str) -> bool:
    """Tell whether ``text`` is an IP address or a host name (RFC 1123 labels)."""
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        pass
    labels = text.rstrip('.').split('.')
    # All-numeric dotted text is a malformed IPv4 address (999.1.1.1), not a host name.
    return (0 < len(text) <= 253 and all(_HOST_LABEL.match(label) for label in labels)
            and not all(label.isdigit() for label in labels))


@dataclasses.dataclass
class RTDEConfig(Section):
    """The physical UR5 through ur_rtde, and the safety supervisor around it (backend ur5)."""

    robot_ip: str = option('192.168.1.102', 'IP address (or host name) of the UR controller.',
                           read_only=True, rule=(_is_address, 'an IPv4 or IPv6 address such as '
                                                 '192.168.1.102, or a host name'))
    frequency: float = option(500.0, 'RTDE rate of the controller: 500 for e-Series, 125 for '
                              'CB3 (a CB3 cannot run at 500).', unit='Hz',
                              choices=(125.0, 500.0), read_only=True)
    control_mode: str = option('speedj', 'Command of each RL step: speedj (joint velocity) or '
                               'servoj (joint position one step ahead).',
                               choices=('speedj', 'servoj'), read_only=True)
    rt_priority: int = option(40, 'SCHED_FIFO priority of the ur_rtde client process; the '
                              'thread that runs the control loop takes 10 less. 0: normal '
                              'priority. Where the OS refuses it: one warning line, normal '
                              'priority.', low=0, high=98, read_only=True)
    acceleration: float = option(8.0, 'Joint acceleration speedJ ramps to a new velocity with.',
                                 unit='rad/s^2', low=0.0, high=40.0, low_open=True)
    servoj_lookahead: float = option(0.1, 'servoJ lookahead time (smooths the trajectory).',
                                     unit='s', low=0.03, high=0.2)
    servoj_gain: float = option(300.0, 'servoJ proportional gain.', low=100.0, high=2000.0)
    speed_scaling: float = option(0.25, 'Factor on every joint velocity sent to the robot, '
                                  'reset moves included; keep it low for the first runs and '
                                  'raise it to 1 once the set-up is trusted.',
                                  low=0.0, high=1.0, low_open=True)
    reset_speed: float = option(0.5, 'Joint speed of the moveJ back to home on reset (before '
                                'speed_scaling).', unit='rad/s', low=0.0, high=3.14,
                                low_open=True)
    reset_acceleration: float = option(1.0, 'Joint acceleration of the reset moveJ.',
                                       unit='rad/s^2', low=0.0, high=40.0, low_open=True)
    watchdog_min_hz: float = option(10.0, 'ur_rtde watchdog: the controller stops the arm when '
                                    'the worker writes less often than this.', unit='Hz',
                                    low=1.0, high=500.0, read_only=True)
    protective_stop_limit: int = option(3, 'Protective stops tolerated within '
                                        'protective_stop_window_s; one more stops the worker '
                                        'and asks for a person.', low=1, high=1000, read_only=True)
    protective_stop_window_s: float = option(600.0, 'Window in which protective stops are '
                                             'counted.', unit='s', low=1.0, high=1e6,
                                             read_only=True)
    protective_stop_cooldown_s: float = option(5.5, 'Wait after a protective stop before the '
                                               'unlock (UR controllers refuse it before 5 s).',
                                               unit='s', low=0.0, high=600.0, read_only=True)
    reconnect_initial_s: float = option(0.5, 'First wait before reconnecting after a lost link; '
                                        'doubled after each failed attempt.', unit='s',
                                        low=0.01, high=60.0)
    reconnect_max_s: float = option(8.0, 'Longest wait between two reconnection attempts.',
                                    unit='s', low=0.01, high=600.0)
    reconnect_attempts: int = option(10, 'Failed reconnection attempts before the worker gives '
                                     'up with an error.', low=1, high=10**6)
    client_timeout_s: float = option(2.0, 'Longest wait for an answer of the ur_rtde client '
                                     'process; a later answer counts as a lost link (the process '
                                     'is killed and restarted on reconnection).', unit='s',
                                     low=0.1, high=60.0)
    max_policy_lag: int = option(8, 'The arm holds still while its policy is more than this '
                                 'many versions behind the learner.', unit='versions',
                                 low=0, high=INT32_MAX, read_only=True)
    heartbeat_timeout_s: float = option(5.0, 'The arm holds still when no learner heartbeat '
                                        'arrived for this long.', unit='s', low=0.1, high=3600.0,
                                        read_only=True)

    def check(self, source: str | None, prefix: str) -> None:
        """Check that the reconnection backoff is ordered."""
        if self.reconnect_initial_s > self.reconnect_max_s:
            raise ConfigError(prefix + 'reconnect_initial_s', self.reconnect_initial_s,
                              f'<= reconnect_max_s = {self.reconnect_max_s:g}', source)


@dataclasses.dataclass
class EnvWorkerConfig(Section):
    """Everything an environment worker needs (ROS node name: ``env_worker``)."""

    moved = {'manipulation.action': 'task.action', 'manipulation.ee_speed': 'task.ee_speed'}

    backend: str = option('sim', 'Robot backend the worker steps: sim (PyBullet) or ur5 (a '
                          'physical UR5 through ur_rtde, see rtde.*).', choices=('sim', 'ur5'),
                          read_only=True)
    seed: int = option(0, 'Seed of the environment and of exploration noise.',
                       low=0, high=2**31 - 1, read_only=True)
    task: TaskConfig = dataclasses.field(default_factory=TaskConfig)
    manipulation: ManipulationConfig = dataclasses.field(default_factory=ManipulationConfig)
    cell: CellConfig = dataclasses.field(default_factory=CellConfig)
    safety: SafetyConfig = dataclasses.field(default_factory=SafetyConfig)
    sim: SimConfig = dataclasses.field(default_factory=SimConfig)
    rtde: RTDEConfig = dataclasses.field(default_factory=RTDEConfig)

    def check(self, source: str | None, prefix: str) -> None:
        """
        Check the cross-section rules.

        Targets must lie inside the safety box (or some would be unreachable by design), and on
        the real robot one RL step must last a whole number of controller periods. Checks that
        need the arm's kinematics (the home pose and its noise against the limits) belong to
        the task plug-in (``Task.check``), which every env factory runs.
        """
        if self.backend == 'ur5':
            self._check_periods(source, prefix)
        margin = self.safety.workspace_margin
        for i, axis in enumerate('xyz'):
            lo = self.safety.workspace_low[i] + margin
            hi = self.safety.workspace_high[i] - margin
            if self.task.target_low[i] < lo:
                raise ConfigError(f'{prefix}task.target_low[{axis}]', self.task.target_low[i],
                                  f'>= safety.workspace_low + margin = {lo:g}', source)
            if self.task.target_high[i] > hi:
                raise ConfigError(f'{prefix}task.target_high[{axis}]', self.task.target_high[i],
                                  f'<= safety.workspace_high - margin = {hi:g}', source)

    @property
    def controller_periods(self) -> int:
        """Return the controller periods (``rtde.frequency``) one real-arm RL step lasts."""
        return max(1, round(self.rtde.frequency / self.task.control_hz))

    def _check_periods(self, source: str | None, prefix: str) -> None:
        """
        Refuse a control rate that is not ``rtde.frequency / n`` for a whole ``n``.

        The real arm waits each step out in :attr:`controller_periods` (``envs.ur5_rtde``),
        so any other rate would silently become the nearest one. The refusal names the two
        nearest rates that work, to six significant digits, which pass this check (10 Hz on a
        CB-series controller's 125 Hz: 10.4167 is 12 periods, 9.61538 is 13).
        """
        freq, hz = self.rtde.frequency, self.task.control_hz
        periods = freq / hz
        if abs(periods - self.controller_periods) <= 1e-5 * periods:
            return
        nearest = [freq / n for n in (math.floor(periods), math.ceil(periods)) if n >= 1]
        named = ' or '.join(f'{rate:.6g}' for rate in nearest)
        raise ConfigError(f'{prefix}task.control_hz', hz,
                          f'a divisor of rtde.frequency = {freq:g} Hz, a whole number of its '
                          f'periods per step; nearest: {named}', source)
