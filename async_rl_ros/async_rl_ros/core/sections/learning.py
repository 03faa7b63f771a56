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
Sections of the learner side: SAC, prioritized replay, hindsight, batch size, checkpoints.

``LearnerConfig`` (node ``learner``) gathers them and the training doctor's section
(:mod:`.doctor`). Import them from :mod:`async_rl_ros.core.config`.
"""

from __future__ import annotations

import dataclasses
import logging

from async_rl_ros.core.options import ConfigError, INT32_MAX, option, Section
from async_rl_ros.core.sections.doctor import DoctorConfig

#: Recommended range of the gradient clip norm (the design write-up's 0.5-1.0).
GRAD_CLIP_RECOMMENDED = (0.5, 1.0)
# the logger name of the grad_clip_norm warning, kept from before the sections moved here
_LOG = logging.getLogger('async_rl_ros.core.config')


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
    smoothness_weight: float = option(
        0.0, 'Weight of the temporal smoothness term in the actor loss, the squared distance '
        'between the mean actions of consecutive states (CAPS, Mysore et al. 2021): the arm '
        'does not chatter against the acceleration limit (0 = off; 0.1: far fewer limited '
        'steps, later success).', low=0.0, high=1e3, read_only=True)
    policy_average_tau: float = option(
        0.01, 'Largest Polyak factor of the averaged actor, updated after every critic step: '
        'the evaluator scores it, while workers keep acting with the online actor (weight '
        'averaging, Nikishin et al. 2018; 0 = the online actor is evaluated). At the end the '
        'last online actor competes for the export too (learner.export_candidates > 1). The '
        'factor is min(policy_average_tau, the growing window below), so the average spans at '
        'least 1 / policy_average_tau updates.',
        low=0.0, high=1.0, read_only=True)
    policy_average_fraction: float = option(
        0.2, 'Smallest span of the actor average as a fraction of the updates so far: the '
        'factor after update t is min(policy_average_tau, 1 / (fraction * t)), so the window '
        'grows with training once it passes 1 / policy_average_tau updates (an average whose '
        'width is a fixed fraction of training time, as the power-function EMA of Karras et '
        'al. 2024, EDM2; 0 = the constant factor policy_average_tau).', low=0.0, high=1.0,
        read_only=True)
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
    cuda_graph: bool = option(
        True, 'On CUDA, capture each whole update (both gradient steps, the Polyak averages) as '
        'one CUDA graph per batch size and replay it: one launch instead of hundreds, the '
        'host free to sample the next batch. Needs compile = off; CPU learners run eager.',
        read_only=True)

    def check(self, source: str | None, prefix: str) -> None:
        """Check the hidden sizes and the CUDA update; warn about an unusual gradient clip."""
        low, high = GRAD_CLIP_RECOMMENDED
        if not low <= self.grad_clip_norm <= high:
            where = f'{source}: ' if source else ''
            _LOG.warning('%s%sgrad_clip_norm = %g is outside the recommended range %g-%g%s',
                         where, prefix, self.grad_clip_norm, low, high,
                         ' (0 turns clipping off)' if self.grad_clip_norm == 0 else '')
        if self.cuda_graph and self.compile != 'off':
            raise ConfigError(prefix + 'compile', self.compile,
                              "'off' while cuda_graph is true (torch.compile makes its own "
                              'graphs: set cuda_graph to false)', source)
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

    directory: str = option('', 'Directory the checkpoints are written to (empty: '
                            'checkpoints/ in the run folder; a folder named here is locked by '
                            'the run that uses it).', read_only=True)
    keep_last: int = option(3, 'Checkpoints kept; older ones are deleted after each save.',
                            low=1, high=10**6, read_only=True)
    interval_steps: int = option(10000, 'Learner updates between two checkpoints (0: only at '
                                 'shutdown).', unit='updates', low=0, high=10**12)
    save_replay_buffer: bool = option(False, 'Store the replay buffer, compressed, in every '
                                      'checkpoint.')


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
                                     'ratio) of lockstep training: single-process and sync '
                                     'training do this many (after max_updates_ramp_steps), '
                                     'each env step costing the learner its wait '
                                     '(free-running workers: min_updates_per_step).',
                                     low=0.0, high=64.0, low_open=True)
    min_updates_per_step: float = option(1.0, 'Fewest gradient updates per env step that '
                                         'free-running simulated workers may bring the learner '
                                         'down to (the rate limit): their steps cost the '
                                         'learner only the ingest, so fresher data at the '
                                         'same updates/s is worth more than a higher ratio.',
                                         low=0.0, high=64.0, low_open=True)
    max_updates_per_step: float = option(4.0, 'Most gradient updates per env step when data '
                                         'arrives slower than the learner can use it (a '
                                         'physical arm): the learner then runs up to this '
                                         'ratio; at least updates_per_step and '
                                         'min_updates_per_step.', low=0.0, high=64.0,
                                         low_open=True)
    max_updates_ramp_steps: int = option(0, 'Env steps over which the update-to-data ratio '
                                         "rises linearly from 0 at the run's first step to "
                                         'its value (max_updates_per_step for free-running '
                                         'workers, updates_per_step in lockstep: sync, '
                                         'single): a slow source (a physical arm) and '
                                         'lockstep training then get the few early updates '
                                         'per transition that fast simulated workers give '
                                         'their learner; the rate limit never asks for more. '
                                         '0: the whole ratio from the first update (push and '
                                         'pick_and_place: 25,000, their own defaults).',
                                         unit='steps', low=0, high=10**12)
    rate_limit_slack: int = option(2000, 'Transitions free-running simulated workers may run '
                                   'ahead of min_updates_per_step before they pause (they '
                                   'skip stepping, never wait for a reply; real arms never '
                                   'pause); 0: no limit.', unit='transitions', low=0,
                                   high=10**9)
    total_env_steps: int = option(20_000, 'Training budget (with the shipped defaults, the '
                                  'evaluator of make train first scored 100 % at 10,126-15,258 '
                                  'env steps on seeds 0-2; single-process runs first reached '
                                  '95 % at 4,000-5,000). Training ends with the batch that '
                                  'reaches it, which is kept whole: every step a worker took '
                                  'is counted, so a run ends up to one batch per worker past '
                                  'it.',
                                  unit='steps', low=1, high=10**12)
    eval_every: int = option(2_500, 'Env steps between two policy snapshots scored by the '
                             'evaluator (0: none); the best one is exported.',
                             unit='steps', low=0, high=10**12, read_only=True)
    eval_episodes: int = option(20, 'Episodes per evaluation of a snapshot.', low=1,
                                high=100_000, read_only=True)
    final_eval_episodes: int = option(100, 'Held-out episodes (seeds no snapshot was chosen '
                                      'by) that judge the exported policy when a run ends; '
                                      'its summary reports their success rate.', low=1,
                                      high=100_000, read_only=True)
    export_candidates: int = option(3, 'Best-scored snapshots re-scored with the last policy '
                                    '(its averaged and online actors) when a run ends, on '
                                    'final_eval_episodes episodes of their own; the best of '
                                    'them is exported. The best of many '
                                    'evaluator scores is partly luck (push, seed 2: the '
                                    "evaluator's best scored 28 of 100 held out, the last "
                                    "policy 47). 1: export the evaluator's best as it is.",
                                    low=1, high=100, read_only=True)
    log_dir: str = option('runs/async_rl', 'Root of the run folders: each run writes its '
                          'TensorBoard logs, learning curve, checkpoints, exported policy and '
                          'summary into <log_dir>/<start time>/, and <log_dir>/latest links to '
                          'the newest run.', read_only=True)
    sac: SACConfig = dataclasses.field(default_factory=SACConfig)
    replay: ReplayConfig = dataclasses.field(default_factory=ReplayConfig)
    her: HindsightConfig = dataclasses.field(default_factory=HindsightConfig)
    doctor: DoctorConfig = dataclasses.field(default_factory=DoctorConfig)
    batch: BatchSizerConfig = dataclasses.field(default_factory=BatchSizerConfig)
    checkpoint: CheckpointConfig = dataclasses.field(default_factory=CheckpointConfig)

    def check(self, source: str | None, prefix: str) -> None:
        """
        Refuse an update-to-data cap below the lockstep ratio or the free-running floor.

        And a replay buffer too small to start: the first update waits for
        ``max(learning_starts, batch.initial_batch)`` stored transitions, which a smaller
        ``replay.capacity`` never holds (the run would collect without ever learning).
        """
        floor = max(self.updates_per_step, self.min_updates_per_step)
        if self.max_updates_per_step < floor:
            raise ConfigError(f'{prefix}max_updates_per_step', self.max_updates_per_step,
                              f'>= updates_per_step = {self.updates_per_step} and '
                              f'min_updates_per_step = {self.min_updates_per_step}', source)
        start = max(self.learning_starts, self.batch.initial_batch)
        if self.replay.capacity < start:
            raise ConfigError(f'{prefix}replay.capacity', self.replay.capacity,
                              f'>= learning_starts = {self.learning_starts} and '
                              f'batch.initial_batch = {self.batch.initial_batch}, the stored '
                              'transitions the first update waits for', source)
