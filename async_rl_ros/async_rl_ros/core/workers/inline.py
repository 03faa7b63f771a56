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
A worker and an evaluator in the learner's own process (single-process training).

:class:`InlineWorker` is both ports of the training loop at once: its source steps the
environment one transition at a time when the loop asks for data, and its sink sends each
new policy down the weight path every runner uses (committer, shard replicas, int8 keyframes
and deltas, the worker's assembler:
:class:`~async_rl_ros.core.weights.receiver.InProcessWeightPath`) and the worker acts with it
at once -- the reference SAC loop, with the packets of the
distributed runners. :class:`PolicyEvaluator` scores snapshots on fixed seeds; inline it runs
when a snapshot is submitted, and the local runner runs the same object in a process of its
own so that evaluation never stops the learner.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from async_rl_ros.core.config import CodecConfig, LearnerConfig, ParameterServerConfig
from async_rl_ros.core.learning.evaluation import EpisodeStats, run_episodes
from async_rl_ros.core.learning.learner import Learner
from async_rl_ros.core.learning.loop import Received
from async_rl_ros.core.records import PolicyState
from async_rl_ros.core.tasks import FINAL_DISTANCE, RankMetric
from async_rl_ros.core.weights.receiver import Expectation, InProcessWeightPath, weights_summary
from async_rl_ros.core.workers.env_worker import EnvWorker, WorkerPolicy

__all__ = ['InlineWorker', 'PolicyEvaluator', 'final_evaluation', 'EVAL_SEED', 'HELD_OUT_SEED',
           'SELECTION_SEED']

#: first reset seed of every evaluation: each snapshot is scored on the same episodes
EVAL_SEED = 1_000_000
#: first reset seed of the exported policy's final evaluation, on episodes no snapshot was
#: chosen by
HELD_OUT_SEED = 2_000_000
#: first reset seed of the episodes that choose the exported policy among the best snapshots
SELECTION_SEED = 3_000_000


class InlineWorker:
    """
    Source and sink of single-process training: one env worker stepped on demand.

    :param worker: the env worker (batch size 1: each transition is ingested at once).
    :param initial: the learner's policy state the shards start from.
    :param ps_cfg: shards, replicas, ring, chunk size of the weight path.
    :param codec_cfg: codec of the packets the shards serve.
    """

    blocking = True

    def __init__(self, worker: EnvWorker, initial: PolicyState,
                 ps_cfg: ParameterServerConfig | None = None,
                 codec_cfg: CodecConfig | None = None):
        self.worker = worker
        self.weights = InProcessWeightPath(ps_cfg or ParameterServerConfig(),
                                           codec_cfg or CodecConfig(), initial)
        self.receiver = self.weights.receiver(  # it takes the layout of its own policy
            worker.env.observation_space.shape[0],
            Expectation.of_policy(worker.policy, num_shards=len(self.weights.boards)))
        self.policies = 0

    def take(self) -> list[Received]:
        """Step the environment once; return the transition."""
        batch = self.worker.step()
        if batch is None:
            return []
        return [Received(batch, self.worker.worker_id, self.worker.take_episode_metrics())]

    def wait(self, timeout: float) -> None:
        """Nothing to wait for: :meth:`take` steps the env (a lockstep source is never idle)."""

    def maintain(self, learner: Learner) -> None:
        """Nothing to maintain in one process."""

    def metrics(self) -> dict[str, float]:
        """Return the weight path's counters: what the worker received."""
        return {k: float(v) for k, v in {**self.weights.stats(),
                                         **self.receiver.stats()}.items()}

    def publish(self, state: PolicyState) -> int | None:
        """Commit the state, let the worker receive it; return its version."""
        version = self.weights.publish(state)
        received = self.receiver.poll()
        if received is not None:
            self.worker.load_policy(received)
            self.policies += 1
        return version

    def summary(self) -> dict[str, Any]:
        """Return the ``weights_*`` figures of ``summary.json``."""
        return weights_summary([{**self.receiver.stats(), 'policies': self.policies}],
                               self.weights.committer.fp32_bytes)


class PolicyEvaluator:
    """
    Deterministic episodes of a policy snapshot on fixed seeds.

    :param env: the evaluation environment.
    :param hidden: hidden layer widths of the actor.
    :param episodes: episodes per snapshot.
    :param seed: reset seed of the first episode (episode ``k`` uses ``seed + k``).
    :param rank: the task's rank metric.
    :param should_stop: asked before every episode; ``True`` ends :meth:`score` with
        :class:`~async_rl_ros.core.learning.evaluation.EvaluationStopped`.
    """

    def __init__(self, env: Any, hidden: Sequence[int], episodes: int, seed: int = EVAL_SEED,
                 rank: RankMetric = FINAL_DISTANCE,
                 should_stop: Callable[[], bool] | None = None):
        self.env, self.episodes, self.seed, self.rank = env, int(episodes), int(seed), rank
        self.should_stop = should_stop
        obs_dim = env.observation_space.shape[0]
        act_dim = env.action_space.shape[0]
        self.policy = WorkerPolicy(obs_dim, act_dim, hidden)
        self._done: list[tuple[int, EpisodeStats]] = []

    def score(self, state: PolicyState) -> EpisodeStats:
        """Run the episodes with ``state``'s deterministic policy; return their statistics."""
        self.policy.load(state)
        return run_episodes(self.env, lambda o: self.policy.act(o, deterministic=True),
                            self.episodes, seed=self.seed, rank=self.rank,
                            should_stop=self.should_stop)

    def submit(self, state: PolicyState) -> bool:
        """Score ``state`` now (inline); the result comes with the next :meth:`poll`."""
        self._done.append((state.version, self.score(state)))
        return True

    def poll(self) -> list[tuple[int, EpisodeStats]]:
        """Return the scores since the last call."""
        out, self._done = self._done, []
        return out


def final_evaluation(env: Any, cfg: LearnerConfig, rank: RankMetric = FINAL_DISTANCE,
                     should_stop: Callable[[], bool] | None = None
                     ) -> Callable[[PolicyState, str], EpisodeStats]:
    """
    Return the final evaluation ``evaluate(state, split)`` that ``finish_run`` takes.

    Each split has episodes of its own. ``'evaluator'`` scores like the evaluator did during
    the run (``cfg.eval_episodes`` episodes from :data:`EVAL_SEED`), so that the last policy
    competes with the scored snapshots on equal terms; ``'selection'`` runs
    ``cfg.final_eval_episodes`` episodes from :data:`SELECTION_SEED`, which choose the exported
    policy among the best snapshots; ``'held_out'`` runs as many from :data:`HELD_OUT_SEED`,
    which judge it and chose nothing. Every runner ends this way.

    :param env: the evaluation environment (a simulated arm).
    :param cfg: the ``learner`` section.
    :param rank: the task's rank metric.
    :param should_stop: a stop request (Ctrl-C, a node shutting down), asked before every
        episode: ``finish_run`` then cuts the evaluation short and exports what it has.
    """
    hidden = cfg.sac.hidden_sizes
    evaluators = {split: PolicyEvaluator(env, hidden, episodes, seed=seed, rank=rank,
                                         should_stop=should_stop)
                  for split, episodes, seed in (
                      ('evaluator', cfg.eval_episodes, EVAL_SEED),
                      ('selection', cfg.final_eval_episodes, SELECTION_SEED),
                      ('held_out', cfg.final_eval_episodes, HELD_OUT_SEED))}

    def evaluate(state: PolicyState, split: str) -> EpisodeStats:
        return evaluators[split].score(state)
    return evaluate
