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
The learner: one object owning SAC, the replay buffer, the normalizer and the counters.

Transport-independent: the single-process trainer below, the local runner's learner process
and the ROS 2 learner node all drive the same three calls --

* :meth:`Learner.ingest` a batch of transitions (any thread);
* :meth:`Learner.train_step` one gradient update (the training thread), returning metrics;
* :meth:`Learner.policy_state` the weights and normalizer statistics workers act with
  (or, with ``evaluated=True``, those of the policy the evaluator scores).

Given the environment's goal spec, :meth:`Learner.ingest` also stores hindsight-relabeled
copies of every finished episode (Andrychowicz et al. 2017; :mod:`.her`).

Observations are stored raw and normalized when sampled, with the statistics of that moment,
so old and new transitions always reach the networks on the same scale; the statistics travel
with the weights so that workers act on identically normalized inputs.
"""

from __future__ import annotations

from collections import OrderedDict
import dataclasses
import threading
from typing import Any, Mapping

from async_rl_ros.core.config import LearnerConfig
from async_rl_ros.core.learning.batch_sizer import BatchSizer, probe_for
from async_rl_ros.core.learning.checkpoint import (capture_rng_state, CheckpointManager,
                                                   restore_rng_state, unpack_replay_buffer)
from async_rl_ros.core.learning.doctor import Doctor, finite_rows, ParamDeltaTracker
from async_rl_ros.core.learning.her import HindsightRelabeler
from async_rl_ros.core.learning.networks import PolicyForExport
from async_rl_ros.core.learning.normalizer import RunningNormalizer
from async_rl_ros.core.learning.ratio import steps_wanted
from async_rl_ros.core.learning.replay import ReplayBuffer
from async_rl_ros.core.learning.sac import SAC, UPDATE_METRICS
from async_rl_ros.core.learning.step_guard import DoctorGuard
from async_rl_ros.core.records import PolicyState
from async_rl_ros.core.tasks import GoalSpec
import numpy as np
import torch

__all__ = ['Learner']

PROBE_SIZE = 256      # observations in the doctor's fixed probe batch
PUBLISHED_KEEP = 16   # recent published policy versions kept for divergence checks


class Learner:
    """
    SAC with count-aware prioritized replay, guarded by the training doctor.

    :param cfg: learner configuration.
    :param obs_dim: observation width.
    :param act_dim: action width (actions in [-1, 1]).
    :param goal_spec: the task's goal spec (:attr:`~async_rl_ros.core.tasks.TaskSpec.goal`);
        with ``her.k > 0`` every finished episode is also stored relabeled (hindsight
        experience replay, see :mod:`.her`). ``None``: no relabeling.
    :param task: the name of the task it learns (:attr:`~async_rl_ros.core.tasks.TaskSpec.name`),
        stored in every checkpoint so that a resume with another task is refused by name.
    """

    def __init__(self, cfg: LearnerConfig, obs_dim: int, act_dim: int,
                 goal_spec: GoalSpec | None = None, task: str | None = None):
        self.cfg = cfg
        self.task = task
        self.obs_dim, self.act_dim = obs_dim, act_dim
        torch.manual_seed(cfg.seed)
        self.rng = np.random.default_rng(cfg.seed)
        self.sac = SAC(obs_dim, act_dim, cfg.sac)
        self.device = self.sac.device
        self.doctor = Doctor(cfg.doctor, knobs=self.sac)
        self.sac.guard = DoctorGuard(self.doctor)
        self.replay = ReplayBuffer(cfg.replay, obs_dim, act_dim,
                                   rng=np.random.default_rng(cfg.seed + 1))
        self.normalizer = RunningNormalizer(obs_dim)
        self.relabeler = (HindsightRelabeler(cfg.her, goal_spec,
                                             np.random.default_rng(cfg.seed + 2))
                          if goal_spec is not None and cfg.her.k > 0 else None)
        self.batch_sizer = BatchSizer(cfg.batch, probe_for(self.device), device=self.device)
        self.checkpoints = CheckpointManager.from_config(cfg.checkpoint, cfg.log_dir)
        self._delta = ParamDeltaTracker(self.sac.actor.parameters())
        self._lock = threading.Lock()  # normalizer statistics and counters
        self._her_lock = threading.Lock()
        self.policy_version = 0      # bumped by whoever publishes weights
        self.env_steps = 0           # transitions ingested from this run's workers
        self.recorded_steps = 0      # transitions ingested from a recording (warm start)
        self.rejected_rows = 0       # transitions dropped for non-finite values
        self.updates = 0
        #: (updates, env steps) when this process's replay first held enough to update: the
        #: origin of both update-to-data bounds (:meth:`env_steps_wanted`, the loop's cap)
        self.ready_at: tuple[int, int] | None = None
        self._published: OrderedDict[int, PolicyState] = OrderedDict()

    # ------------------------------------------------------------------ data in
    def ingest(self, batch: Mapping[str, np.ndarray], *, recorded: bool = False) -> int:
        """
        Add a batch of transitions; safe from any thread.

        The batch holds ``obs``, ``action``, ``reward``, ``next_obs``, ``terminated``,
        ``truncated``, ``policy_version`` and ``worker_id`` with a leading batch dimension.
        Rows with non-finite numbers are dropped and counted. With hindsight relabeling, the
        relabeled copies of the episodes this batch ends are stored too (with the maximum
        priority, like any new transition); they count neither as env steps nor in the
        returned number.

        :param batch: the transitions.
        :param recorded: the batch was recorded before this run (a warm start from a bag),
            not collected by its workers. It is stored like any other (replay, normalizer
            statistics, hindsight copies), with ``policy_version`` -1 (no policy of this
            run acted), but counted in :attr:`recorded_steps`, not in :attr:`env_steps`: the
            ``total_env_steps`` budget, ``warmup_steps`` and the workers' rate limit
            (:meth:`env_steps_wanted`) are about this run's own steps, and the doctor's
            reward and lag statistics about its own workers.
        :returns: the number of transitions of ``batch`` stored.
        """
        keep = np.asarray(finite_rows(batch), dtype=bool)
        if not keep.all():
            batch = {k: np.asarray(v)[keep] if np.ndim(v) else v for k, v in batch.items()}
        n = int(keep.sum())
        if recorded and n:
            batch = dict(batch, policy_version=np.full(n, -1, np.int64))
        with self._lock:
            self.rejected_rows += int(keep.size - n)
            if n == 0:
                return 0
            self.normalizer.update(batch['obs'])
            if recorded:
                self.recorded_steps += n
            else:
                self.env_steps += n
            version = self.policy_version
            probe = self.doctor.probe
            if probe is None or len(probe) < PROBE_SIZE:
                rows = np.asarray(batch['obs'], dtype=np.float32)
                probe = rows if probe is None else np.concatenate([probe, rows])
                self.doctor.set_probe(probe[:PROBE_SIZE])
        self.replay.extend(batch)
        if self.relabeler is not None:
            with self._her_lock:  # episode accumulators
                relabeled = self.relabeler.add(batch)
            if relabeled is not None:
                self.replay.extend(relabeled)
        if recorded:
            return n
        workers = np.broadcast_to(np.asarray(batch['worker_id']), (n,))
        rewards = np.asarray(batch['reward'], dtype=np.float64).reshape(n)
        for worker in np.unique(workers):
            self.doctor.observe_rewards(int(worker), rewards[workers == worker])
        acted = np.broadcast_to(np.asarray(batch['policy_version']), (n,))
        acted = acted[acted >= 0]  # negative: random warm-up actions, no policy to lag behind
        if acted.size:
            self.doctor.observe_lag(version - acted)
        return n

    def ready(self) -> bool:
        """
        Return whether enough transitions arrived to start updating.

        The first ``True`` records :attr:`ready_at`; from then on the learner stays ready.
        """
        if self.ready_at is not None:
            return True
        with self._lock:  # the training thread and a ROS timer may both ask
            if self.ready_at is None and len(self.replay) >= self.start_size:
                self.ready_at = (self.updates, self.env_steps)
        return self.ready_at is not None

    @property
    def start_size(self) -> int:
        """Return how many transitions the replay buffer holds before the first update."""
        return max(self.cfg.learning_starts, self.batch_sizer.batch_size)

    def env_steps_wanted(self, slack: int) -> int:
        """
        Return how many transitions in total the learner can use now (the workers' rate limit).

        Until the replay holds enough to update, every transition it still lacks; from then
        on one per ``1 / min_updates_per_step`` updates (no more than the ramped cap lets the
        learner do, :mod:`.ratio`), counted from :attr:`ready_at`, plus
        ``slack`` that workers may run ahead: a sample-to-insert limiter in the manner of
        Reverb (Cassirer et al., 2021). The loop's cap on updates per transition counts from
        :attr:`ready_at` too. Counted from the run's first step instead, a learner resumed
        where its workers had used up their slack wanted no transition beyond its replay's
        refill, while the cap allowed it only ``max_updates_per_step`` updates per
        transition after that refill: each side waited for the other.

        :param slack: transitions allowed beyond the update-to-data ratio.
        """
        if not self.ready():  # a new run's first transitions, or a resumed replay's refill
            return self.env_steps + self.start_size - len(self.replay) + slack
        updates0, steps0 = self.ready_at
        cfg = self.cfg
        return int(steps_wanted(self.updates - updates0, cfg.min_updates_per_step,
                                cfg.max_updates_per_step, steps0,
                                cfg.max_updates_ramp_steps)) + slack

    # ------------------------------------------------------------------ update
    def train_step(self) -> dict[str, float]:
        """
        Sample, update SAC, refresh priorities; return the step's metrics.

        A CUDA out-of-memory error halves the batch and retries the same step; a non-finite
        batch, loss or gradient skips the step (the doctor restores the last good state).
        """
        self.doctor.begin_step(self.updates)
        self.batch_sizer.maybe_adjust()
        measure = self.doctor.update_ratio_due()
        if measure:
            self._delta.capture()
        metrics = self.batch_sizer.run_with_oom_retry(self._update)
        if measure:
            self.doctor.observe_update_ratio(self._delta.ratio(), 'actor')
        if 'losses/entropy' in metrics:
            self.doctor.observe_entropy(metrics['losses/entropy'])
        modules = {'actor': self.sac.actor, 'critic': self.sac.critic,
                   'critic_target': self.sac.critic_target}
        if self.sac.actor_average is not None:
            modules['actor_average'] = self.sac.actor_average
        self.doctor.remember(modules,
                             {'actor': self.sac.actor_optimizer,
                              'critic': self.sac.critic_optimizer,
                              'alpha': self.sac.alpha_optimizer},
                             {'log_alpha': self.sac.log_alpha})
        self.updates += 1
        metrics['charts/batch_size'] = float(self.batch_sizer.batch_size)
        return metrics

    def _update(self, batch_size: int) -> dict[str, float]:
        indices, batch, info = self.replay.sample(batch_size, learner_version=self.policy_version)
        with self._lock:
            mean, std = self.normalizer.mean, self.normalizer.std
        clip = self.normalizer.clip
        tensors = {
            'obs': np.clip((batch['obs'] - mean) / std, -clip, clip),
            'next_obs': np.clip((batch['next_obs'] - mean) / std, -clip, clip),
            'action': batch['action'], 'reward': batch['reward'],
            'terminated': batch['terminated'],
        }
        arrays = {k: np.asarray(v, dtype=np.float32) for k, v in tensors.items()}
        # Checked on the host, before the copy: no device synchronization.
        if not self.doctor.batch_ok(arrays):
            return {'doctor/skipped': 1.0}
        tensors = {k: torch.as_tensor(v, device=self.device) for k, v in arrays.items()}
        weights = torch.as_tensor(info['weights'], device=self.device)
        metrics, td_abs = self.sac.update(tensors, weights)
        if not metrics.get('doctor/skipped'):
            self.replay.update_priority(indices, td_abs, insert_ids=info['insert_ids'])
        metrics['replay/mean_weight'] = float(np.mean(info['weights']))
        metrics['replay/mean_policy_lag'] = float(np.mean(info['policy_lag']))
        return metrics

    # ------------------------------------------------------------------ policy out
    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        """Return an action for one raw observation (single-process use)."""
        with self._lock:
            z = self.normalizer.normalize(obs)
        x = torch.as_tensor(z, device=self.device).unsqueeze(0)
        return self.sac.actor.act(x, deterministic=deterministic)[0].cpu().numpy()

    def policy_state(self, evaluated: bool = False) -> PolicyState | None:
        """
        Return what a worker needs to act: actor weights (CPU), normalizer stats, version.

        Non-finite weights are never handed out: the doctor refuses them (returns ``None``).

        :param evaluated: the policy to evaluate and export (the averaged actor when
            ``sac.policy_average_tau > 0``) instead of the online actor workers act with.
        """
        module = self.sac.evaluated_actor if evaluated else self.sac.actor
        if not self.doctor.publish_ok(module):
            return None
        with self._lock:
            mean, std = self.normalizer.stats()
            version = self.policy_version
        actor = {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}
        return PolicyState(actor=actor, obs_mean=mean, obs_std=std,
                           obs_clip=float(self.normalizer.clip), version=version)

    def published(self, state: PolicyState, version: int) -> None:
        """
        Record that workers received ``state`` as ``version`` (the policy-divergence check).

        Also makes ``version`` the learner's policy version: transitions stamped with it lag
        by what was published since.
        """
        self.policy_version = int(version)
        self._published[int(version)] = dataclasses.replace(state, version=int(version))
        while len(self._published) > PUBLISHED_KEEP:
            self._published.popitem(last=False)

    def policy_from_state(self, state: PolicyState) -> PolicyForExport:
        """Rebuild the deterministic CPU policy a worker runs from a :meth:`policy_state`."""
        policy = PolicyForExport(self.obs_dim, self.act_dim, self.sac.cfg.hidden)
        policy.load_actor_state_dict(dict(state.actor))
        policy.set_normalization(torch.as_tensor(state.obs_mean),
                                 torch.as_tensor(state.obs_std), float(state.obs_clip))
        return policy.eval()

    def check_policy_divergence(self, worker_versions: Mapping[int, int]) -> dict[int, float]:
        """
        Compare the newest published policy with the versions the workers act with.

        The training doctor raises the policy regularization when a worker's policy has
        diverged (action cosine on the probe batch below ``doctor.min_policy_cosine``); the
        regularization then pulls the actor towards the oldest version still in use. Updates
        not yet committed are no worker's lag (none can act with them): compared with them, a
        lockstep round's updates read as a diverged worker (15 detections, with pulls towards
        the round's policy, in 110,000 env steps of a sync ``gym:PandaPush-v3`` run).

        :param worker_versions: ``{worker_id: policy_version it acts with}``; versions this
            learner no longer remembers are ignored.
        :returns: ``{worker_id: cosine similarity}``.
        """
        probe = self.doctor.probe
        known = {w: v for w, v in worker_versions.items() if v in self._published}
        if probe is None or not known or self.policy_version not in self._published:
            return {}
        obs = torch.as_tensor(np.asarray(probe, dtype=np.float32))
        with torch.no_grad():  # each version's actions once (workers mostly share the newest)
            actions = {v: self.policy_from_state(self._published[v])(obs).numpy()
                       for v in {self.policy_version, *known.values()}}
        cosines = self.doctor.policy_divergence(
            actions[self.policy_version], {w: actions[v] for w, v in known.items()})
        if self.sac.policy_reg_weight > 0.0:
            self.sac.set_reference_policy(dict(self._published[min(known.values())].actor))
        return cosines

    def export_policy(self, evaluated: bool = False) -> torch.nn.Module:
        """
        Return the deterministic policy with its normalization, ready for TorchScript.

        :param evaluated: the policy to evaluate and export instead of the online actor (see
            :meth:`policy_state`).
        """
        with self._lock:
            mean, std = self.normalizer.stats()
        policy = self.sac.export_policy(torch.as_tensor(mean), torch.as_tensor(std),
                                        evaluated=evaluated)
        policy.set_normalization(None, None, self.normalizer.clip)
        return policy.cpu().eval()

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Return the complete training state (without the replay buffer)."""
        return {
            'sac': self.sac.state_dict(),
            'doctor': self.doctor.state_dict(),
            'normalizer': self.normalizer.state_dict(),
            'counters': {'policy_version': self.policy_version, 'env_steps': self.env_steps,
                         'updates': self.updates, 'rejected_rows': self.rejected_rows,
                         'batch_size': self.batch_sizer.batch_size},
            'rng': capture_rng_state({'learner': self.rng}),
            'config': self.cfg.to_flat(),
            'task': self.task,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a state from :meth:`state_dict` (and the replay buffer if it was saved)."""
        self.sac.load_state_dict(state['sac'])
        if 'doctor' in state:  # checkpoints from before it had remedies to undo have none
            self.doctor.load_state_dict(state['doctor'])
        self.normalizer.load_state_dict(state['normalizer'])
        counters = state['counters']
        self.policy_version = int(counters['policy_version'])
        self.env_steps = int(counters['env_steps'])
        self.updates = int(counters['updates'])
        self.rejected_rows = int(counters['rejected_rows'])
        self.batch_sizer.batch_size = int(counters['batch_size'])
        restore_rng_state(state['rng'], {'learner': self.rng})
        if state.get('replay_buffer') is not None:
            self.replay.load_state_dict(unpack_replay_buffer(state['replay_buffer']))

    def save_checkpoint(self, extra: Mapping[str, Any] | None = None) -> str:
        """Write an atomic checkpoint; returns its path."""
        state = self.state_dict()
        state.update(extra or {})
        replay = self.replay if self.cfg.checkpoint.save_replay_buffer else None
        return str(self.checkpoints.save(state, self.updates, replay_buffer=replay))

    def metrics(self) -> dict[str, float]:
        """Return counters and the doctor's and batch sizer's metrics."""
        out = {'charts/env_steps': float(self.env_steps), 'charts/updates': float(self.updates),
               'charts/policy_version': float(self.policy_version),
               'charts/replay_size': float(len(self.replay)),
               'charts/recorded_steps': float(self.recorded_steps),
               'doctor/rejected_rows': float(self.rejected_rows)}
        if self.relabeler is not None:
            out['her/relabeled'] = float(self.relabeler.relabeled)
        out.update(self.doctor.metrics())
        out.update(self.batch_sizer.metrics())
        return out

    def metric_names(self) -> list[str]:
        """
        Return the names :meth:`metrics` and :meth:`train_step` report, before any update.

        The doctor and the batch sizer can add names later (per worker, once measured).
        """
        step = ('replay/mean_weight', 'replay/mean_policy_lag', 'charts/batch_size')
        return list(dict.fromkeys((*self.metrics(), *UPDATE_METRICS, *step)))
