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
The env worker: one environment, a CPU copy of the policy, transitions out in batches.

Transport-independent: the local runner's worker process and the ROS 2 worker node both
call :meth:`EnvWorker.step` in a loop, hand it new weights with :meth:`EnvWorker.load_policy`
whenever their transport has some (never waiting for them), and ship the batches that
:meth:`EnvWorker.step` returns. A batch goes out when it is full, or earlier once the policy
has moved ``max_batch_lag`` versions past its first transition: a learner that publishes
faster than a worker fills a batch would otherwise receive data older than the batching
needs (:meth:`EnvWorker.flush_stale` does the same for a worker the rate limit holds back).
Every transition is stamped with the worker id and the ``policy_version`` of the weights that
chose its action, and with its ``source`` (``'sim'`` or ``'real'``, see
:data:`async_rl_ros.core.records.SOURCES`) so that a mixed fleet's replay can weight
real-robot data.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

from async_rl_ros.core.learning.evaluation import EpisodeTracker
from async_rl_ros.core.learning.networks import Actor
from async_rl_ros.core.records import empty_transition_batch, PolicyState, TransitionBatch
from async_rl_ros.core.tasks import FINAL_DISTANCE, RankMetric
from async_rl_ros.core.workers.inference import control_threads, TimedInference, warm_up
import numpy as np
import torch

__all__ = ['WorkerPolicy', 'EnvWorker', 'NO_POLICY', 'WorkerPacer']

#: ``policy_version`` of transitions acted with uniform random actions (no weights yet).
NO_POLICY = -1


class WorkerPolicy(TimedInference):
    """
    The actor a worker samples exploration actions from, with the learner's normalization.

    Inference is timed (:attr:`latency`, :attr:`first_action_ms`) and reported to the step
    budget of an arm's control loop; the actor is warmed up when built, without touching
    torch's global random generator (new weights are copied into the same tensors: no new
    warm-up). A process that drives an arm calls :meth:`fit_for_control` once (one intra-op
    thread, process-wide).

    :param obs_dim: observation width.
    :param act_dim: action width.
    :param hidden: hidden layer widths of the learner's actor.
    :param seed: seed of the action noise.
    """

    def __init__(self, obs_dim: int, act_dim: int, hidden: Sequence[int], seed: int = 0):
        self.actor = Actor(obs_dim, act_dim, hidden).eval()
        self.obs_mean = np.zeros(obs_dim, dtype=np.float32)
        self.obs_std = np.ones(obs_dim, dtype=np.float32)
        self.obs_clip = float('inf')
        self.version = NO_POLICY
        self.run_id: int | None = None  # the learner run of the weights (None: none yet)
        self.generator = torch.Generator().manual_seed(seed)
        super().__init__()
        self.warm_ms = self._warm_up()             #: time (ms) of a call right after warm-up

    def fit_for_control(self) -> None:
        """Prepare this process's inference for a control loop: one thread, warmed up."""
        control_threads(1)
        self.warm_ms = self._warm_up()

    def _warm_up(self) -> float:
        return warm_up(lambda x: self.actor.act(x, deterministic=True), self.actor.obs_dim)

    def load(self, state: PolicyState) -> None:
        """Install a learner's policy state (actor weights, normalizer, version)."""
        self.actor.load_state_dict(dict(state.actor))
        self.obs_mean = np.asarray(state.obs_mean, dtype=np.float32)
        self.obs_std = np.asarray(state.obs_std, dtype=np.float32)
        self.obs_clip = float(state.obs_clip)
        self.version = int(state.version)
        self.run_id = int(state.run_id)

    @torch.inference_mode()
    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        """Return an action in [-1, 1] for one raw observation (timed)."""
        start = time.perf_counter()
        z = np.clip((obs - self.obs_mean) / self.obs_std, -self.obs_clip, self.obs_clip)
        x = torch.as_tensor(z, dtype=torch.float32).unsqueeze(0)
        if deterministic:
            action = self.actor.act(x, deterministic=True)[0].numpy()
        else:   # Actor.sample's action, without the log-probability a worker has no use for
            noise = torch.randn(1, self.actor.act_dim, generator=self.generator)
            mean, log_std = self.actor(x)
            action = torch.tanh(mean + log_std.exp() * noise)[0].numpy()
        self._timed(time.perf_counter() - start)
        return action


class EnvWorker:
    """
    Step one environment without ever waiting for the learner.

    :param worker_id: stamped on every transition.
    :param env: a gymnasium environment with actions in [-1, 1].
    :param policy: the CPU policy; the worker acts at random until it has weights (the
        learner publishes none before its warm-up is over, so warm-up belongs to the start of
        training, and a worker started later acts with the current policy at once).
    :param batch_size: transitions per batch handed to the transport.
    :param max_batch_lag: hand over a partly filled batch once the policy is this many
        versions newer than its first transition (0: full batches only).
    :param seed: seed of the environment and of the random actions.
    :param source: ``'sim'`` or ``'real'``, stamped on every transition.
    :param rank: the task's rank metric, reported with each finished episode.

    The first episode starts (``env.reset``) with the first :meth:`step`, in the thread that
    steps: a physical arm's reset moves it and may wait for inputs its transport delivers
    (the cube's pose), so it never runs where the worker is built (a node's *configure*).
    """

    def __init__(self, worker_id: int, env: Any, policy: WorkerPolicy, batch_size: int = 64,
                 seed: int = 0, source: str = 'sim', rank: RankMetric = FINAL_DISTANCE,
                 max_batch_lag: int = 0):
        self.worker_id = int(worker_id)
        self.source = source
        self.env = env
        self.policy = policy
        self.batch_size = int(batch_size)
        self.max_batch_lag = int(max_batch_lag)
        self.rng = np.random.default_rng(seed)
        self.episodes = EpisodeTracker(rank=rank)
        self.steps = 0
        obs_dim = env.observation_space.shape[0]
        act_dim = env.action_space.shape[0]
        self.act_dim = act_dim
        n = self.batch_size
        self._batch = empty_transition_batch(n, obs_dim, act_dim, self.worker_id, source)
        self._fill = 0
        self._seed = seed
        self._obs: np.ndarray | None = None   # no episode yet: the first step resets
        self.episode_metrics: list[dict[str, float]] = []

    def load_policy(self, state: PolicyState) -> bool:
        """
        Install newer weights; older or equal versions of the same run are ignored.

        A state of another learner run (restarted, counting versions again) is newer whatever
        its version: the receiver only assembles the newest run. Returns whether used.
        """
        same_run = state.run_id == self.policy.run_id
        if same_run and state.version <= self.policy.version:
            return False
        self.policy.load(state)
        return True

    def step(self) -> TransitionBatch | None:
        """Take one env step; return a batch when it is full or the policy moved past it."""
        if self._obs is None:
            self._obs, _ = self.env.reset(seed=self._seed)
        if self.policy.version == NO_POLICY:
            action = self.rng.uniform(-1.0, 1.0, self.act_dim).astype(np.float32)
            version = NO_POLICY
        else:
            action = self.policy.act(self._obs)
            version = self.policy.version
        next_obs, reward, terminated, truncated, info = self.env.step(action)
        k = self._fill
        b = self._batch
        b['obs'][k] = self._obs
        b['action'][k] = action
        b['reward'][k] = reward
        b['next_obs'][k] = next_obs
        b['terminated'][k] = terminated
        b['truncated'][k] = truncated
        b['policy_version'][k] = version
        self._fill += 1
        self.steps += 1
        done = terminated or truncated
        self.episodes.step(reward, done, info, emit=self.episode_metrics.append)
        self._obs = self.env.reset()[0] if done else next_obs
        if self._fill < self.batch_size and not self._held_too_long():
            return None
        return self._take()

    def flush_stale(self) -> TransitionBatch | None:
        """
        Return the transitions held so far once the policy moved ``max_batch_lag`` past them.

        A worker that does not step (paused by the rate limit) calls this between polls: the
        transitions it holds reach the learner while the learner still counts them as fresh,
        and a long pause sends them once, not once per poll.
        """
        return self._take() if self._held_too_long() else None

    def _held_too_long(self) -> bool:
        first = int(self._batch['policy_version'][0])
        return (self.max_batch_lag > 0 and self._fill > 0
                and self.policy.version - first >= self.max_batch_lag)

    def _take(self) -> TransitionBatch:
        n, self._fill = self._fill, 0
        return TransitionBatch(**{key: value[:n].copy() for key, value in self._batch.items()})

    def take_episode_metrics(self) -> list[dict[str, float]]:
        """Return and clear the metrics of the episodes finished since the last call."""
        out, self.episode_metrics = self.episode_metrics, []
        return out


class WorkerPacer:
    """
    Tell a simulated worker to pause while it is ahead of what the learner can use.

    The learner reports now and then how many transitions it received and how many it can use
    (:meth:`Learner.env_steps_wanted`); between reports the worker adds the steps it made
    itself. With W workers the overshoot is at most W times the learner's slack. A worker that
    has heard nothing yet, or a report of ``wanted < 0`` (no limit), never pauses.
    """

    def __init__(self):
        self._report: tuple[int, int, int] | None = None

    def report(self, received: int, wanted: int, own_steps: int) -> None:
        """Record the learner's counters; ``own_steps`` is this worker's step count now."""
        self._report = (int(received), int(wanted), int(own_steps))

    def should_pause(self, own_steps: int) -> bool:
        """Return whether the worker should skip stepping for a moment."""
        if self._report is None:
            return False
        received, wanted, then = self._report
        return wanted >= 0 and received + (own_steps - then) >= wanted
