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
The training doctor's section: its detectors' thresholds and its remedies (``doctor.*``).

Part of ``LearnerConfig`` (node ``learner``). Import it from :mod:`async_rl_ros.core.config`.
"""

from __future__ import annotations

import dataclasses

from async_rl_ros.core.options import ConfigError, option, Section

__all__ = ['DoctorConfig']


@dataclasses.dataclass
class DoctorConfig(Section):
    """Thresholds and remedies of the training doctor (learner parameters ``doctor.*``)."""

    auto_remedy: bool = option(True, 'Apply remedies through the learner knobs; when false the '
                               'doctor only detects, logs and counts.')
    remedy_cooldown_steps: int = option(1000, 'Learner updates a detector waits after a remedy '
                                        'before it may apply the next one.', unit='updates',
                                        low=0, high=10**9)
    remedy_recovery_steps: int = option(5000, 'Learner updates a detector must stay quiet (no '
                                        'detection, no remedy) before its latest remedy still '
                                        'in force is undone, the knob multiplied back by the '
                                        'inverse factor; one remedy per quiet interval, until '
                                        'the knob is back at its configured value (0: remedies '
                                        'stay for good).', unit='updates', low=0, high=10**9)
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
    update_ratio_window: int = option(20, 'Update-ratio measurements averaged before the '
                                      'mean is compared with the band: a sustained drift is a '
                                      'finding, one large update is not (1: every '
                                      'measurement).', unit='measurements', low=1, high=10**6)
    warmup_updates: int = option(10_000, 'Learner updates before the doctor judges the learning '
                                 'dynamics (measured and published all along): the update '
                                 'ratio, since the first Adam steps are large against the '
                                 'initial weights (window means of healthy default runs: up to '
                                 '1.6e-3 in the first 3,000 updates, 1.2e-3 at 5,000 with 4 '
                                 'updates per transition, about 4e-4 later), and the policy '
                                 'divergence, since the young policy moves fast (action cosines '
                                 'of 0.71-0.81 to the version a worker acted with after 270-370 '
                                 'updates of default async runs).',
                                 unit='updates', low=0, high=10**9)
    reward_scale_factor: float = option(3.0, 'Largest allowed ratio between a worker reward scale '
                                        'and the median scale of the workers.',
                                        low=1.0, high=1e6, low_open=True)
    reward_scale_statistic: str = option('mean_abs', 'Reward scale of a worker: the running '
                                         'mean of |r| or the running standard deviation. The '
                                         'deviation of a sparse reward (-1 until success, 0) '
                                         'measures how often a worker succeeded, not its scale: '
                                         'on push over ROS 2 a worker that had not succeeded '
                                         'yet had 0 and the other was flagged.',
                                         choices=('mean_abs', 'std'))
    reward_min_samples: int = option(1000, 'Rewards a worker must have sent before its scale is '
                                     'compared.', low=1, high=10**9)
    min_policy_cosine: float = option(0.9, 'Smallest healthy cosine similarity between the '
                                      'actions of the newest published policy and of a worker '
                                      'policy on the probe batch.', low=-1.0, high=1.0)
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
