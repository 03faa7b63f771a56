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
Episodes and what is read from them.

:func:`run_episodes` runs a policy for whole episodes and summarizes them (:class:`EpisodeStats`:
evaluation, demos, benchmarks); :class:`Evaluation` is a policy snapshot with the statistics it
scored; :class:`EpisodeTracker` turns a worker's stream of steps into per-episode metrics.
"""

from __future__ import annotations

from collections import Counter
import dataclasses
import math
import time
from typing import Any, Callable, Mapping

from async_rl_ros.core.records import PolicyState
from async_rl_ros.core.tasks import FINAL_DISTANCE, RankMetric
import numpy as np

__all__ = ['EpisodeStats', 'EpisodeTracker', 'Evaluation', 'EvaluationStopped', 'run_episodes']


@dataclasses.dataclass
class EpisodeStats:
    """
    Summary of a batch of episodes; success and the rank metric are read at each episode's end.

    :param rank: the task's rank metric (``info[rank.key]`` of each episode's last step).
    """

    episodes: int = 0
    steps: int = 0
    successes: int = 0
    returns: list[float] = dataclasses.field(default_factory=list)
    final_values: list[float] = dataclasses.field(default_factory=list)
    safety: Counter = dataclasses.field(default_factory=Counter)
    seconds: float = 0.0
    rank: RankMetric = FINAL_DISTANCE

    @property
    def success_rate(self) -> float:
        """Fraction of episodes whose last step was a success."""
        return self.successes / self.episodes if self.episodes else 0.0

    @property
    def mean_final(self) -> float:
        """Mean of the rank metric at the end of the episodes (NaN without episodes)."""
        return float(np.mean(self.final_values)) if self.final_values else float('nan')

    def ranking(self) -> tuple[float, float]:
        """Return the sort key of these statistics: success rate, then the rank metric."""
        return self.success_rate, self.rank.score(self.mean_final)

    @property
    def intervention_rates(self) -> dict[str, float]:
        """Fraction of steps at which the safety filter changed the command, per reason."""
        if not self.steps:
            return {}
        return {k: v / self.steps for k, v in sorted(self.safety.items())}

    def rows(self, rate: bool = True) -> list[tuple[str, str]]:
        """
        Return ``(name, value)`` rows for a printed table.

        :param rate: include the env steps/s of the evaluation itself (a training summary
            leaves it out: it is not the run's throughput).
        """
        reasons = ', '.join(f'{k} {100.0 * v:.1f} % of steps'
                            for k, v in self.intervention_rates.items()) or 'none'
        rows = [('episodes', f'{self.episodes}'), ('env steps', f'{self.steps}'),
                ('success rate', f'{100.0 * self.success_rate:.1f} %'),
                (f'mean {self.rank.label}',
                 f'{self.mean_final:.4f}' + (f' {self.rank.unit}' if self.rank.unit else '')),
                ('mean return', f'{np.mean(self.returns):.2f}')]
        if rate:
            steps_per_s = self.steps / self.seconds if self.seconds > 0 else float('nan')
            rows.append(('env steps/s', f'{steps_per_s:.0f}'))
        return rows + [('safety interventions', reasons)]


@dataclasses.dataclass
class Evaluation:
    """A scored snapshot: the state, its statistics and the env steps when it was taken."""

    state: PolicyState
    stats: EpisodeStats
    env_steps: int
    #: the online actor, where the evaluator scores the averaged one
    #: (``sac.policy_average_tau > 0``); its version is the averaged actor's of that time
    online: bool = False

    def better_than(self, other: 'Evaluation | None') -> bool:
        """Higher success rate wins; ties go to the task's rank metric, then the newer."""
        if other is None:
            return True
        return self.stats.ranking() >= other.stats.ranking()


class EpisodeTracker:
    """
    Turn a stream of steps into per-episode metrics (``charts/episodic_return`` ...).

    :param window: episodes averaged for ``charts/success_rate``.
    :param rank: the task's rank metric, reported as ``charts/final_<key>``.
    """

    def __init__(self, window: int = 50, rank: RankMetric = FINAL_DISTANCE):
        self.window = window
        self.rank = rank
        self.returns: list[float] = []
        self.successes: list[bool] = []
        self.final_values: list[float] = []
        self._return = 0.0
        self._length = 0

    def step(self, reward: float, done: bool, info: Mapping[str, Any],
             emit: Callable[[dict[str, float]], None] | None = None) -> None:
        """Account one step; on episode end, record it and pass its metrics to ``emit``."""
        self._return += float(reward)
        self._length += 1
        if not done:
            return
        self.returns.append(self._return)
        self.successes.append(bool(info.get('is_success', False)))
        self.final_values.append(float(info.get(self.rank.key, math.nan)))
        if emit is not None:
            emit({'charts/episodic_return': self._return,
                  'charts/episodic_length': float(self._length),
                  'charts/success_rate': self.success_rate,
                  'charts/episode_success': float(self.successes[-1]),
                  f'charts/final_{self.rank.key}': self.final_values[-1]})
        self._return, self._length = 0.0, 0

    @property
    def success_rate(self) -> float:
        """Return the success rate of the last ``window`` episodes (0 before any)."""
        recent = self.successes[-self.window:]
        return sum(recent) / len(recent) if recent else 0.0


class EvaluationStopped(RuntimeError):
    """A stop request ended :func:`run_episodes` between two episodes."""


def run_episodes(env: Any, policy: Callable[[np.ndarray], np.ndarray], episodes: int,
                 seed: int, progress: bool = False, rank: RankMetric = FINAL_DISTANCE,
                 should_stop: Callable[[], bool] | None = None) -> EpisodeStats:
    """
    Run ``episodes`` episodes of ``policy`` on ``env`` and collect statistics.

    :param env: a task's environment (its ``info`` carries ``is_success``, ``rank.key`` and,
        behind a safety filter, ``safety``).
    :param policy: maps an observation to an action.
    :param episodes: number of episodes; episode ``k`` is reset with seed ``seed + k``.
    :param progress: show a progress bar.
    :param rank: the task's rank metric.
    :param should_stop: asked before every episode; ``True`` raises :class:`EvaluationStopped`
        (a stopping process waits one episode at most, not the whole evaluation).
    """
    from tqdm import tqdm

    stats = EpisodeStats(rank=rank)
    start = time.perf_counter()
    bar = tqdm(range(episodes), desc='episodes', unit='ep', disable=not progress,
               dynamic_ncols=True)
    for ep in bar:
        if should_stop is not None and should_stop():
            bar.close()
            raise EvaluationStopped(f'stopped after {ep} of {episodes} episodes')
        obs, info = env.reset(seed=seed + ep)
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, info = env.step(policy(obs))
            total += reward
            stats.steps += 1
            stats.safety.update(info.get('safety', ()))
            done = terminated or truncated
        stats.episodes += 1
        stats.successes += int(info['is_success'])
        stats.returns.append(total)
        stats.final_values.append(float(info.get(rank.key, math.nan)))
        bar.set_postfix(success=f'{stats.success_rate:.2f}')
    stats.seconds = time.perf_counter() - start
    return stats
