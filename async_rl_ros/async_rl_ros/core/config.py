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
Typed configuration: the single source of truth for every tunable of the project.

One section (a dataclass built with :func:`~async_rl_ros.core.options.option`) per component;
``NODE_SECTIONS`` maps each node name of the parameter files in ``config/`` to its section.
``python -m async_rl_ros.core.config`` prints ``docs/parameters.md``.
"""

from __future__ import annotations

import dataclasses
import logging
import math

from async_rl_ros.core.options import (check_box, ConfigError, INT32_MAX, load_node_config,
                                       load_yaml_parameters, option, OptionInfo,
                                       parameters_markdown, Section)

__all__ = [
    # the framework, re-exported: ``core.config`` is where users import configuration from
    'ConfigError',
    'OptionInfo',
    'option',
    'Section',
    'load_yaml_parameters',
    'load_node_config',
    'parameters_markdown',
    # the sections
    'ReachTaskConfig',
    'SafetyConfig',
    'SimConfig',
    'RTDEConfig',
    'EnvWorkerConfig',
    'SACConfig',
    'ReplayConfig',
    'HindsightConfig',
    'DoctorConfig',
    'BatchSizerConfig',
    'CheckpointConfig',
    'LearnerConfig',
    'CodecConfig',
    'ParameterServerConfig',
    'LocalRunnerConfig',
    'RosTransportConfig',
    'NODE_SECTIONS',
]

#: Recommended range of the gradient clip norm (the design write-up's 0.5-1.0).
GRAD_CLIP_RECOMMENDED = (0.5, 1.0)
#: Start-pose check of ``EnvWorkerConfig``: at least this many of ``START_DRAWS`` seeded draws
#: of ``home_q + noise`` must lie within the safety limits (resets rejection-sample them).
MIN_START_FIT, START_DRAWS = 50, 200
_LOG = logging.getLogger(__name__)
_TWO_PI = 6.2832  # rad, 2 pi rounded up: UR joints turn +-360 deg


# ====================================================================== sections
@dataclasses.dataclass
class ReachTaskConfig(Section):
    """The reach task, simulated or real; at run time changes apply from the next episode."""

    control_hz: float = option(25.0, 'RL control rate; one env step lasts 1/control_hz.',
                               unit='Hz', low=1.0, high=500.0)
    episode_seconds: float = option(4.0, 'Episode time limit; the episode is truncated after it.',
                                    unit='s', low=0.04, high=3600.0)
    action_scale: float = option(0.5, 'Fraction of the joint speed limit that action 1.0 means.',
                                 low=0.0, high=1.0, low_open=True)
    home_q: list[float] = option(
        [0.0, -1.5708, 1.5708, -1.5708, -1.5708, 0.0],
        'Joint positions the arm returns to on reset.', unit='rad',
        low=-_TWO_PI, high=_TWO_PI, length=6)
    home_noise: float = option(0.05, 'Uniform noise added to each home joint position on reset.',
                               unit='rad', low=0.0, high=0.5)
    target_low: list[float] = option([-0.60, -0.30, 0.10],
                                     'Lower corner of the target box (base frame).',
                                     unit='m', low=-2.0, high=2.0, length=3)
    target_high: list[float] = option([-0.30, 0.10, 0.45],
                                      'Upper corner of the box targets are sampled in.',
                                      unit='m', low=-2.0, high=2.0, length=3)
    success_distance: float = option(0.02, 'Flange-to-target distance that counts as reached.',
                                     unit='m', low=0.0, high=1.0, low_open=True)
    distance_weight: float = option(1.0, 'Weight of the -distance reward term.',
                                    low=0.0, high=100.0)
    shaping_weight: float = option(1.0, 'Weight of the 0.5 * (1 - tanh(d / shaping_scale)) term.',
                                   low=0.0, high=100.0)
    shaping_scale: float = option(0.1, 'Length scale of the tanh shaping term.', unit='m',
                                  low=0.0, high=10.0, low_open=True)
    action_penalty: float = option(0.0, 'Weight of the -||action||^2 reward term.',
                                   low=0.0, high=100.0)
    terminate_on_success: bool = option(False, 'End the episode as soon as the target is reached.')

    def check(self, source: str | None, prefix: str) -> None:
        """Check that the target box is not empty."""
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
class SimConfig(Section):
    """PyBullet simulation of the UR5."""

    physics_hz: float = option(500.0, 'Physics rate (the e-Series controller runs at 500 Hz); '
                               'each control step runs round(physics_hz / control_hz) sub-steps.',
                               unit='Hz', low=25.0, high=2000.0, read_only=True)
    gui: bool = option(False, 'Open the PyBullet GUI (needs a display) for a person to watch.',
                       read_only=True)
    real_time: bool = option(False, 'Pace the simulated arm to the wall clock (one control '
                             'period per step), as a physical arm delivers its transitions: '
                             'arm-time studies without an arm.')


@dataclasses.dataclass
class RTDEConfig(Section):
    """The physical UR5 through ur_rtde, and the safety supervisor around it (backend ur5)."""

    robot_ip: str = option('192.168.1.102', 'IP address of the UR controller.',
                           read_only=True)
    frequency: float = option(500.0, 'RTDE rate of the controller: 500 for e-Series, 125 for '
                              'CB3 (a CB3 cannot run at 500).', unit='Hz',
                              choices=(125.0, 500.0), read_only=True)
    control_mode: str = option('speedj', 'Command of each RL step: speedj (joint velocity) or '
                               'servoj (joint position one step ahead).',
                               choices=('speedj', 'servoj'), read_only=True)
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

    backend: str = option('sim', 'Robot backend the worker steps: sim (PyBullet) or ur5 (a '
                          'physical UR5 through ur_rtde, see rtde.*).', choices=('sim', 'ur5'),
                          read_only=True)
    seed: int = option(0, 'Seed of the environment and of exploration noise.',
                       low=0, high=2**31 - 1, read_only=True)
    task: ReachTaskConfig = dataclasses.field(default_factory=ReachTaskConfig)
    safety: SafetyConfig = dataclasses.field(default_factory=SafetyConfig)
    sim: SimConfig = dataclasses.field(default_factory=SimConfig)
    rtde: RTDEConfig = dataclasses.field(default_factory=RTDEConfig)

    def check(self, source: str | None, prefix: str) -> None:
        """
        Check the cross-section rules.

        Targets must lie inside the safety box (or some would be unreachable by design), and on
        the real robot one RL step must last a whole number of controller periods.
        """
        if self.backend == 'ur5':
            ratio = self.rtde.frequency / self.task.control_hz
            if abs(ratio - round(ratio)) > 1e-9:
                raise ConfigError(f'{prefix}task.control_hz', self.task.control_hz,
                                  f'a divisor of rtde.frequency = {self.rtde.frequency:g} Hz',
                                  source)
        self._check_starts(source, prefix)
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

    def _check_starts(self, source: str | None, prefix: str) -> None:
        """Refuse a home pose outside the safety limits, or noise that almost never fits."""
        from async_rl_ros.envs.safety import start_fit  # the kinematics live in envs/

        home_ok, fit = start_fit(self.task, self.safety, START_DRAWS)
        if not home_ok:
            raise ConfigError(f'{prefix}task.home_q', self.task.home_q,
                              'a pose within safety.joint_lower/upper less joint_margin whose '
                              'flange lies in safety.workspace_low/high less workspace_margin',
                              source)
        if fit < MIN_START_FIT:
            raise ConfigError(f'{prefix}task.home_noise', self.task.home_noise,
                              f'a noise for which at least {MIN_START_FIT} of {START_DRAWS} '
                              f'starts home_q +- home_noise lie within the safety limits and '
                              f'box, only {fit} do: lower it or widen safety.workspace_*', source)


# ====================================================================== learner
@dataclasses.dataclass
class ReplayConfig(Section):
    """The prioritized replay buffer of the learner."""

    capacity: int = option(1_000_000, 'Number of transitions the ring buffer holds.',
                           unit='transitions', low=1, high=INT32_MAX, read_only=True)
    alpha: float = option(0.6, 'Mix of the two priority terms: alpha * |TD| + '
                          '(1 - alpha) / sqrt(sample_count + 1); 0 ignores the TD errors.',
                          low=0.0, high=1.0, read_only=True)
    priority_exponent: float = option(1.0, 'Sampling probability is proportional to '
                                      'priority ** priority_exponent (0 samples uniformly).',
                                      low=0.0, high=10.0, read_only=True)
    beta_start: float = option(0.4, 'Importance-weight exponent at the first sample call; it '
                               'grows linearly to 1.', low=0.0, high=1.0)
    beta_steps: int = option(100_000, 'Sample calls over which beta reaches 1 (0: beta is 1 '
                             'from the start).', unit='calls', low=0, high=INT32_MAX)
    eps: float = option(1e-6, 'Added to every priority so that none is 0.', low=0.0,
                        high=1.0, low_open=True, read_only=True)
    staleness: str = option('off', 'Treatment of transitions whose policy lags the learner by '
                            'more than max_policy_lag versions: off, weight (down-weight them) '
                            'or skip (evict and re-draw them).', choices=('off', 'weight', 'skip'))
    max_policy_lag: int = option(8, 'Largest policy lag (learner version minus the version that '
                                 'collected the data) that is not stale.', unit='versions',
                                 low=0, high=INT32_MAX)
    stale_weight: float = option(0.5, 'Importance-weight factor per version of lag beyond '
                                 'max_policy_lag (staleness = weight).', low=0.0, high=1.0)
    skip_redraws: int = option(4, 'Rounds of re-drawing stale samples (staleness = skip) before '
                               'the rest are returned with weight 0.', unit='rounds',
                               low=0, high=64)
    seed: int = option(0, 'Seed of the sampling random generator.', low=0, high=INT32_MAX,
                       read_only=True)
    real_weight: float = option(1.0, 'Mixed fleet: sampling weight of a transition from a real '
                                'robot relative to a simulated one (2 draws real data twice '
                                'as often at equal priority; importance weights do not undo it).',
                                low=0.0, high=1000.0, low_open=True, read_only=True)


@dataclasses.dataclass
class HindsightConfig(Section):
    """Hindsight experience replay (Andrychowicz et al. 2017) in the learner (section ``her``)."""

    k: int = option(4, 'Relabeled copies stored per transition when its episode ends, each with '
                    'a goal the episode achieved (0: off; needs the goal spec of the env).',
                    unit='copies', low=0, high=64)
    strategy: str = option('future', 'Where relabeled goals come from: future (achieved at '
                           'this step or later in the episode) or final (the last position '
                           'the episode achieved).', choices=('future', 'final'))


@dataclasses.dataclass
class SACConfig(Section):
    """Hyper-parameters of the SAC learner."""

    gamma: float = option(0.99, 'Discount factor.', low=0.0, high=1.0)
    tau: float = option(0.005, 'Polyak factor of the target critics (1 = hard copy).',
                        low=0.0, high=1.0, low_open=True)
    actor_lr: float = option(3e-4, 'Adam learning rate of the actor.', low=0.0, high=1.0,
                             low_open=True, read_only=True)
    critic_lr: float = option(3e-4, 'Adam learning rate of the twin critics.', low=0.0,
                              high=1.0, low_open=True, read_only=True)
    alpha_lr: float = option(3e-4, 'Adam learning rate of log(alpha), the temperature.',
                             low=0.0, high=1.0, low_open=True, read_only=True)
    init_alpha: float = option(0.1, 'Initial temperature; 0.1 keeps the entropy bonus of a '
                               '6-joint policy near the per-step reward scale of the reach task.',
                               low=0.0, high=100.0, low_open=True, read_only=True)
    target_entropy_scale: float = option(1.0, 'Target entropy is -scale * act_dim '
                                         '(1.0 is the usual "auto" setting).',
                                         low=-10.0, high=10.0, read_only=True)
    hidden_sizes: list[int] = option([128, 128], 'Hidden layer widths of actor and critics '
                                     '(128: twice the updates/s of 256 on a CPU learner).',
                                     low=1, high=4096, read_only=True)
    critic_layer_norm: bool = option(True, 'Layer-normalize every hidden layer of the critics '
                                     '(Ball et al. 2023, RLPD): stable at high update-to-data '
                                     'ratios.', read_only=True)
    critic_dropout: float = option(0.01, 'Dropout probability of every hidden critic layer '
                                   '(DroQ, Hiraoka et al. 2022; 0 = none).', low=0.0, high=0.9,
                                   read_only=True)
    policy_frequency: int = option(1, 'Update the actor every k critic steps, then k times '
                                   '(delayed policy updates, CleanRL style).', low=1, high=100)
    target_network_frequency: int = option(1, 'Polyak-update the target critics every k '
                                           'critic steps.', low=1, high=10000)
    grad_clip_norm: float = option(1.0, 'Global gradient norm clip of actor and critics '
                                   '(0 = off).', low=0.0, high=1e6)
    policy_reg_weight: float = option(0.0, 'Weight of the L2 pull of the actor mean action '
                                      'towards a reference policy (0 = off).', low=0.0,
                                      high=1e3, read_only=True)
    device: str = option('auto', 'Device of the learner; auto picks CUDA when present.',
                         choices=('auto', 'cpu', 'cuda'), read_only=True)
    compile: str = option(  # noqa: A003 -- the option's public name
        'off', 'torch.compile the loss computations on CUDA (CPU always runs eager); auto '
        'falls back to eager if compilation fails.', choices=('off', 'auto', 'on'),
        read_only=True)
    compile_mode: str = option('reduce-overhead', 'torch.compile mode (reduce-overhead uses '
                               'CUDA graphs).', choices=('reduce-overhead', 'default',
                                                         'max-autotune-no-cudagraphs'),
                               read_only=True)

    def check(self, source: str | None, prefix: str) -> None:
        """Check the hidden sizes; warn about a gradient clip outside 0.5-1.0 (0 = off)."""
        low, high = GRAD_CLIP_RECOMMENDED
        if not low <= self.grad_clip_norm <= high:
            where = f'{source}: ' if source else ''
            _LOG.warning('%s%sgrad_clip_norm = %g is outside the recommended range %g-%g%s',
                         where, prefix, self.grad_clip_norm, low, high,
                         ' (0 turns clipping off)' if self.grad_clip_norm == 0 else '')
        if not self.hidden_sizes:
            raise ConfigError(prefix + 'hidden_sizes', self.hidden_sizes, 'at least one layer',
                              source)
        for size in self.hidden_sizes:
            if int(size) != size:
                raise ConfigError(prefix + 'hidden_sizes', self.hidden_sizes, 'whole numbers',
                                  source)

    @property
    def hidden(self) -> tuple[int, ...]:
        """Hidden layer widths as integers (YAML lists arrive as floats)."""
        return tuple(int(h) for h in self.hidden_sizes)

    def target_entropy(self, act_dim: int) -> float:
        """
        Return the entropy the temperature steers the policy towards.

        :param act_dim: action width.
        :returns: ``-target_entropy_scale * act_dim`` (nats).
        """
        return -self.target_entropy_scale * act_dim


@dataclasses.dataclass
class DoctorConfig(Section):
    """Thresholds and remedies of the training doctor (learner parameters ``doctor.*``)."""

    auto_remedy: bool = option(True, 'Apply remedies through the learner knobs; when false the '
                               'doctor only detects, logs and counts.')
    remedy_cooldown_steps: int = option(1000, 'Learner updates a detector waits after a remedy '
                                        'before it may apply the next one.', unit='updates',
                                        low=0, high=10**9)
    warn_interval_steps: int = option(1000, 'Learner updates between two logged warnings of one '
                                      'detector; detections in between are only counted.',
                                      unit='updates', low=0, high=10**9)
    max_events: int = option(1000, 'Events kept in memory; the oldest are dropped first.',
                             low=1, high=10**7, read_only=True)
    restore_on_skip: bool = option(True, 'Restore the last good snapshot when a step is skipped '
                                   'because of a NaN/Inf loss or gradient.')
    snapshot_interval_steps: int = option(100, 'Learner updates between two good-state '
                                          'snapshots (Doctor.remember).', unit='updates',
                                          low=1, high=10**9)
    max_consecutive_skips: int = option(100, 'Consecutive skipped steps after which training is '
                                        'declared diverged and TrainingDiverged is raised '
                                        '(0: never).', low=0, high=10**9)
    update_ratio_low: float = option(1e-4, 'Smallest healthy ||dtheta|| / ||theta|| per update.',
                                     low=0.0, high=1.0)
    update_ratio_high: float = option(1e-3, 'Largest healthy ||dtheta|| / ||theta|| per update.',
                                      low=0.0, high=10.0, low_open=True)
    update_ratio_interval_steps: int = option(10, 'Learner updates between two measurements of '
                                              'the update ratio (each copies the weights).',
                                              unit='updates', low=1, high=10**9)
    reward_scale_factor: float = option(3.0, 'Largest allowed ratio between a worker reward scale '
                                        'and the median scale of the workers.',
                                        low=1.0, high=1e6, low_open=True)
    reward_scale_statistic: str = option('std', 'Reward scale of a worker: the running standard '
                                         'deviation or the running mean of |r|.',
                                         choices=('std', 'mean_abs'))
    reward_min_samples: int = option(1000, 'Rewards a worker must have sent before its scale is '
                                     'compared.', low=1, high=10**9)
    min_policy_cosine: float = option(0.9, 'Smallest healthy cosine similarity between the '
                                      'actions of the current policy and of a worker policy on '
                                      'the probe batch.', low=-1.0, high=1.0)
    policy_regularization_factor: float = option(1.5, 'Factor the policy regularization weight '
                                                 'is multiplied by when policies diverge.',
                                                 low=1.0, high=100.0)
    min_entropy: float = option(-12.0, 'Smallest healthy policy entropy estimate mean(-log pi); '
                                'the default is twice the usual SAC target -|A| of the 6-D UR5 '
                                'action.', unit='nat', low=-1e6, high=1e6)
    temperature_factor: float = option(1.1, 'Factor the entropy temperature is multiplied by when '
                                       'exploration collapses.', low=1.0, high=100.0)
    max_policy_lag: float = option(100.0, 'Largest healthy mean parameter-version lag of incoming '
                                   'transitions.', unit='versions', low=0.0, high=1e9)
    lag_learning_rate_factor: float = option(0.8, 'Factor the learning rates are multiplied by '
                                             'when transitions are too stale.',
                                             low=0.0, high=1.0, low_open=True)

    def check(self, source: str | None, prefix: str) -> None:
        """Check that the update-ratio band is not empty."""
        if self.update_ratio_low >= self.update_ratio_high:
            raise ConfigError(prefix + 'update_ratio_low', self.update_ratio_low,
                              f'< update_ratio_high = {self.update_ratio_high:g}', source)


@dataclasses.dataclass
class BatchSizerConfig(Section):
    """Dynamic batch size of the learner (learner parameters ``batch.*``)."""

    initial_batch: int = option(256, 'Batch size at start (the usual SAC batch; a GPU learner '
                                'grows it).', unit='samples', low=1, high=2**24, read_only=True)
    min_batch: int = option(32, 'Smallest batch size.', unit='samples', low=1, high=2**24)
    max_batch: int = option(8192, 'Largest batch size.', unit='samples', low=1, high=2**24)
    adaptive: bool = option(True, 'Resize from memory readings; when false the size only '
                            'changes on out-of-memory errors.')
    grow_on_cpu: bool = option(False, 'Also grow the batch on a CPU learner. Off by default: '
                               'a CPU update is compute-bound, so a bigger batch only slows it; '
                               'shrinking under memory pressure stays on.', read_only=True)
    adjust_interval_s: float = option(300.0, 'Time between two memory readings.', unit='s',
                                      low=0.0, high=1e6)
    memory_fraction: float = option(0.85, 'Cap on the used fraction of memory capacity (GPU '
                                    'memory on CUDA, RAM on CPU).', low=0.0, high=1.0,
                                    low_open=True)
    grow_below: float = option(0.7, 'Low-water mark: the batch grows only while the used '
                               'fraction is below it.', low=0.0, high=1.0)
    grow_factor: float = option(1.25, 'Multiplicative growth per adjustment.', low=1.0,
                                high=4.0, low_open=True)
    size_multiple: int = option(8, 'Batch sizes are multiples of this (tensor-core friendly).',
                                low=1, high=4096)
    oom_hold_s: float = option(1800.0, 'No growth for this long after an out-of-memory error.',
                               unit='s', low=0.0, high=1e7)

    def check(self, source: str | None, prefix: str) -> None:
        """Check that the bounds are ordered and the low-water mark is below the cap."""
        if self.min_batch > self.max_batch:
            raise ConfigError(prefix + 'min_batch', self.min_batch,
                              f'<= max_batch = {self.max_batch}', source)
        if not self.min_batch <= self.initial_batch <= self.max_batch:
            raise ConfigError(prefix + 'initial_batch', self.initial_batch,
                              f'in [min_batch, max_batch] = [{self.min_batch}, '
                              f'{self.max_batch}]', source)
        if self.grow_below >= self.memory_fraction:
            raise ConfigError(prefix + 'grow_below', self.grow_below,
                              f'< memory_fraction = {self.memory_fraction:g}', source)


@dataclasses.dataclass
class CheckpointConfig(Section):
    """Learner checkpoints (learner parameters ``checkpoint.*``)."""

    directory: str = option('runs/async_rl/checkpoints',
                            'Directory the checkpoints are written to.', read_only=True)
    keep_last: int = option(3, 'Checkpoints kept; older ones are deleted after each save.',
                            low=1, high=10**6, read_only=True)
    interval_steps: int = option(10000, 'Learner updates between two checkpoints (0: only at '
                                 'shutdown).', unit='updates', low=0, high=10**12)
    save_replay_buffer: bool = option(False, 'Store the replay buffer, compressed, in every '
                                      'checkpoint.')


@dataclasses.dataclass
class CodecConfig(Section):
    """Compression of the policy weights sent from the learner to the workers."""

    quantize: bool = option(True, 'Quantize the weights (int8 deltas, keyframes of '
                            'keyframe_bits); when false they travel as raw float32 (the '
                            'uncompressed reference).', read_only=True)
    per_channel: bool = option(True, 'One scale and zero point per output row of every tensor '
                               'with two or more dimensions; when false one per tensor.',
                               read_only=True)
    entropy_coding: str = option('zlib', 'Lossless coding of the int8 codes (a tensor keeps '
                                 'the raw codes when zlib does not make them smaller).',
                                 choices=('none', 'zlib'), read_only=True)
    zlib_level: int = option(6, 'zlib compression level (1: fastest, 9: smallest).',
                             low=1, high=9, read_only=True)
    delta: bool = option(True, 'Between keyframes send int8 deltas on the last keyframe (a '
                         'full packet): a worker that missed packets still applies the next '
                         'one; when false every packet is full.', read_only=True)
    keyframe_bits: int = option(12, 'Bits per weight of a keyframe: 8 (int8 affine codes) or '
                                '9 to 16 (symmetric codes sent as int16): the precision a '
                                'worker acts with until the next delta refines it.',
                                unit='bits', low=8, high=16, read_only=True)
    delta_refine: int = option(8, 'A delta row is quantized on the step of an int8 full packet '
                               'of the row divided by delta_refine (or on its own range over '
                               '254 steps when that is wider): 1 sends the fewest bytes, '
                               'larger values send finer corrections.',
                               low=1, high=256, read_only=True)
    full_every: int = option(10, 'Every full_every-th packet is a keyframe, the base of the '
                             'deltas that follow (1: always full).',
                             unit='packets', low=1, high=10**9, read_only=True)


@dataclasses.dataclass
class ParameterServerConfig(Section):
    """Sharded parameter server and delayed commits (parameters ``parameter_server.*``)."""

    num_shards: int = option(2, 'Parameter-server shards started at launch.', low=1, high=1024,
                             read_only=True)
    replicas: int = option(2, 'Shards that hold a copy of each partition (the primary and the '
                           'next distinct shards clockwise on the hash ring).', low=1, high=16,
                           read_only=True)
    virtual_nodes: int = option(128, 'Points each shard occupies on the consistent-hash ring; '
                                'the relative spread of the shard loads is about '
                                '1/sqrt(virtual_nodes).', low=1, high=65536, read_only=True)
    chunk_size: int = option(16384, 'Floats per partition: tensors are cut into chunks of this '
                             'size, so a big layer spreads over several shards.', unit='floats',
                             low=1, high=INT32_MAX, read_only=True)
    commit_every: int = option(8, 'Optimizer steps between two commits of the accumulated '
                               'parameter change (delayed update; 1 commits every step).',
                               unit='updates', low=1, high=10**6, read_only=True)

    def check(self, source: str | None, prefix: str) -> None:
        """Check that there are enough shards for the replicas."""
        if self.replicas > self.num_shards:
            raise ConfigError(prefix + 'replicas', self.replicas,
                              f'<= num_shards = {self.num_shards}', source)


@dataclasses.dataclass
class LearnerConfig(Section):
    """Everything the learner needs (ROS node name: ``learner``)."""

    seed: int = option(0, 'Seed of network initialization, sampling and warm-up actions.',
                       low=0, high=INT32_MAX, read_only=True)
    learning_starts: int = option(1000, 'Transitions in the replay buffer before the first '
                                  'update.', unit='transitions', low=1, high=INT32_MAX)
    warmup_steps: int = option(1000, 'Env steps acted with uniform random actions before the '
                               'policy takes over.', unit='steps', low=0, high=INT32_MAX,
                               read_only=True)
    updates_per_step: float = option(2.0, 'Gradient updates per env step (update-to-data '
                                     'ratio) the learner keeps up with: single-process and '
                                     'sync training do exactly this many; free-running '
                                     'workers are rate-limited so that the learner never '
                                     'falls below it.', low=0.0, high=64.0, low_open=True)
    max_updates_per_step: float = option(4.0, 'Most gradient updates per env step when data '
                                         'arrives slower than the learner can use it (a '
                                         'physical arm): the learner then runs up to this '
                                         'ratio; at least updates_per_step.', low=0.0,
                                         high=64.0, low_open=True)
    rate_limit_slack: int = option(2000, 'Transitions free-running simulated workers may run '
                                   'ahead of updates_per_step before they pause (they skip '
                                   'stepping, never wait for a reply; real arms never pause); '
                                   '0: no limit.', unit='transitions', low=0, high=10**9)
    total_env_steps: int = option(30_000, 'Training budget (with the shipped defaults the '
                                  'evaluated success reached 95 % at 15,000-20,000 env steps '
                                  'in the runs so far).', unit='steps', low=1,
                                  high=10**12)
    eval_every: int = option(2_500, 'Env steps between two policy snapshots scored by the '
                             'evaluator (0: none); the best one is exported.',
                             unit='steps', low=0, high=10**12, read_only=True)
    eval_episodes: int = option(20, 'Episodes per evaluation.', low=1, high=100_000,
                                read_only=True)
    log_dir: str = option('runs/async_rl', 'Directory of TensorBoard logs, the learning curve, '
                          'checkpoints and the exported policy.', read_only=True)
    sac: SACConfig = dataclasses.field(default_factory=SACConfig)
    replay: ReplayConfig = dataclasses.field(default_factory=ReplayConfig)
    her: HindsightConfig = dataclasses.field(default_factory=HindsightConfig)
    doctor: DoctorConfig = dataclasses.field(default_factory=DoctorConfig)
    batch: BatchSizerConfig = dataclasses.field(default_factory=BatchSizerConfig)
    checkpoint: CheckpointConfig = dataclasses.field(default_factory=CheckpointConfig)

    def check(self, source: str | None, prefix: str) -> None:
        """Refuse an update-to-data cap below the ratio the learner keeps up with."""
        if self.max_updates_per_step < self.updates_per_step:
            raise ConfigError(f'{prefix}max_updates_per_step', self.max_updates_per_step,
                              f'>= updates_per_step = {self.updates_per_step}', source)


@dataclasses.dataclass
class LocalRunnerConfig(Section):
    """The no-ROS runner's processes and transport (section ``local_runner``)."""

    mode: str = option('async', 'async: worker processes never wait for the learner; sync: '
                       'the same in lockstep rounds (the baseline); single: the learner steps '
                       'one environment itself (the reference SAC loop).',
                       choices=('async', 'sync', 'single'))
    num_workers: int = option(0, 'Env worker processes (0: physical cores - 1, at least 1).',
                              low=0, high=1024)
    transition_batch: int = option(64, 'Transitions per message from a worker.',
                                   unit='transitions', low=1, high=65536)
    queue_batches: int = option(256, 'Messages the transition queue holds before workers drop '
                                'batches (they never wait).', low=1, high=1_000_000)
    stats_interval_s: float = option(2.0, 'Seconds between metric reports.', unit='s',
                                     low=0.1, high=3600.0)
    parameter_server: ParameterServerConfig = dataclasses.field(
        default_factory=ParameterServerConfig)
    codec: CodecConfig = dataclasses.field(default_factory=CodecConfig)


@dataclasses.dataclass
class RosTransportConfig(Section):
    """The ROS 2 nodes' transport (section ``ros_transport``; read by ``train.launch.py``)."""

    transition_batch: int = option(64, 'Transitions per TransitionBatch message from a worker.',
                                   unit='transitions', low=1, high=65536, read_only=True)
    max_raw_batches: int = option(1024, 'Received batches queued for preprocessing before the '
                                  'oldest is dropped (subscriptions never block).', low=1,
                                  high=1_000_000, read_only=True)
    metrics_hz: float = option(2.0, 'Rate of the scalar metric topics and TrainingStats.',
                               unit='Hz', low=0.01, high=100.0, read_only=True)
    diagnostics_hz: float = option(1.0, 'Rate of the DiagnosticArray on /diagnostics and of the '
                                   'worker and shard status messages.', unit='Hz', low=0.01,
                                   high=100.0, read_only=True)
    worker_timeout_s: float = option(5.0, 'A worker silent for longer is reported stale.',
                                     unit='s', low=0.1, high=3600.0)
    warm_start_bag: str = option('', 'rosbag2 recording of TransitionBatch topics the learner '
                                 'loads into its replay buffer at start (empty: none).',
                                 read_only=True)
    parameter_server: ParameterServerConfig = dataclasses.field(
        default_factory=ParameterServerConfig)
    codec: CodecConfig = dataclasses.field(default_factory=CodecConfig)


NODE_SECTIONS: dict[str, type[Section]] = {
    'env_worker': EnvWorkerConfig,
    'learner': LearnerConfig,
    'local_runner': LocalRunnerConfig,
    'ros_transport': RosTransportConfig,
}

if __name__ == '__main__':
    print(parameters_markdown(NODE_SECTIONS), end='')
