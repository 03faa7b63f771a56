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
Single-process training: the learner steps one environment itself.

The reference loop for tests and for comparisons with other SAC implementations: act, step,
ingest the transition, update ``updates_per_step`` times. Random actions during warm-up.
"""

from __future__ import annotations

from typing import Any, Callable

from async_rl_ros.core.learning.evaluation import run_episodes
from async_rl_ros.core.learning.learner import EpisodeTracker, Learner
from async_rl_ros.core.learning.metrics import MetricsLogger
import numpy as np

__all__ = ['train_single_process']


def train_single_process(learner: Learner, env: Any, total_steps: int, *,
                         logger: MetricsLogger | None = None, eval_env: Any = None,
                         eval_every: int = 0, eval_episodes: int = 10,
                         on_step: Callable[[int, Learner], None] | None = None,
                         log_every: int = 250) -> MetricsLogger:
    """
    Train for ``total_steps`` environment steps.

    :param learner: the learner (its config supplies warm-up and update ratio).
    :param env: a gymnasium environment with actions in [-1, 1].
    :param logger: metric sink; a history-only logger is created when omitted.
    :param eval_env: environment for periodic deterministic evaluation (``eval/*`` metrics).
    :param eval_every: evaluate every this many env steps (0 = never).
    :param on_step: called after every env step (progress bars, checkpoints).
    :param log_every: log learner metrics every this many env steps.
    :returns: the logger, whose history holds every metric.
    """
    cfg = learner.cfg
    logger = logger if logger is not None else MetricsLogger()
    episodes = EpisodeTracker()
    rng = np.random.default_rng(cfg.seed)
    obs, _ = env.reset(seed=cfg.seed)
    owed = 0.0  # fractional updates carried over (updates_per_step may be < 1)
    metrics: dict[str, float] = {}
    for step in range(1, total_steps + 1):
        if learner.env_steps < cfg.warmup_steps:
            action = rng.uniform(-1.0, 1.0, size=learner.act_dim).astype(np.float32)
        else:
            action = learner.act(obs)
        next_obs, reward, terminated, truncated, info = env.step(action)
        learner.ingest({'obs': obs[None], 'action': np.asarray(action)[None],
                        'reward': np.array([reward], dtype=np.float32),
                        'next_obs': next_obs[None], 'terminated': np.array([terminated]),
                        'truncated': np.array([truncated]),
                        'policy_version': np.array([learner.policy_version]),
                        'worker_id': np.array([0])})
        episodes.step(reward, terminated or truncated, info,
                      emit=lambda m: logger.log(m, learner.env_steps))
        obs = next_obs
        if terminated or truncated:
            obs, _ = env.reset()
        if learner.ready():
            owed += cfg.updates_per_step
            while owed >= 1.0:
                metrics = learner.train_step()
                learner.policy_version += 1  # single process: the actor acts at once
                owed -= 1.0
        if step % log_every == 0 and metrics:
            logger.log({**metrics, **learner.metrics()}, learner.env_steps)
        if eval_env is not None and eval_every and step % eval_every == 0:
            stats = run_episodes(eval_env, lambda o: learner.act(o, deterministic=True),
                                 eval_episodes, seed=10_000 + step)
            logger.log({'eval/success_rate': stats.success_rate,
                        'eval/final_distance': stats.mean_final_distance,
                        'eval/episodic_return': float(np.mean(stats.returns))},
                       learner.env_steps)
        if on_step is not None:
            on_step(step, learner)
    return logger
