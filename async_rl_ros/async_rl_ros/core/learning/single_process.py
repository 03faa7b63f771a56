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
Single-process training: the training loop with the environment stepped in this process.

The reference loop for tests and for comparisons with other SAC implementations: act, step,
ingest the transition, update ``updates_per_step`` times (ramped by ``max_updates_ramp_steps``,
:mod:`~async_rl_ros.core.learning.ratio`), the actor acting with every update
at once (received as the distributed workers receive it: int8 packets through the shards).
Random actions until ``warmup_steps`` transitions arrived.
"""

from __future__ import annotations

from typing import Any

from async_rl_ros.core.learning.learner import Learner
from async_rl_ros.core.learning.loop import Evaluator, TrainingLoop
from async_rl_ros.core.learning.metrics import MetricsLogger
from async_rl_ros.core.workers.env_worker import EnvWorker, WorkerPolicy
from async_rl_ros.core.workers.inline import InlineWorker

__all__ = ['single_process_loop', 'train_single_process']


def single_process_loop(learner: Learner, env: Any, *, logger: MetricsLogger | None = None,
                        evaluator: Evaluator | None = None, seed: int | None = None,
                        stats_interval_s: float = 2.0) -> TrainingLoop:
    """
    Return a training loop whose source and sink are ``env`` stepped in this process.

    :param learner: the learner (its config supplies warm-up, update ratio, budget).
    :param env: a gymnasium environment with actions in [-1, 1].
    :param logger: metric sink; a history-only logger is created when omitted.
    :param evaluator: scores snapshots every ``learner.eval_every`` env steps.
    :param seed: seed of the env and of the exploration noise (default: the learner's).
    :param stats_interval_s: seconds between two metric reports.
    """
    seed = learner.cfg.seed if seed is None else seed
    policy = WorkerPolicy(learner.obs_dim, learner.act_dim, learner.cfg.sac.hidden_sizes, seed)
    inline = InlineWorker(EnvWorker(0, env, policy, batch_size=1, seed=seed),
                          learner.policy_state())
    return TrainingLoop(learner, inline, inline, commit_every=1,
                        logger=logger if logger is not None else MetricsLogger(),
                        stats_interval_s=stats_interval_s, evaluator=evaluator)


def train_single_process(learner: Learner, env: Any, total_steps: int, **kwargs: Any
                         ) -> TrainingLoop:
    """
    Train for ``total_steps`` more environment steps; return the loop (its logger's history).

    :param learner: the learner.
    :param env: a gymnasium environment with actions in [-1, 1].
    :param total_steps: env steps to add to the learner's count.
    :param kwargs: passed to :func:`single_process_loop`.
    """
    loop = single_process_loop(learner, env, **kwargs)
    goal = learner.env_steps + int(total_steps)
    loop.maybe_publish()
    while learner.env_steps < goal:
        loop.step()
    loop.report()
    return loop
