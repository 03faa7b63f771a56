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
The training loop, one for every runner: ingest, rate limit, update, commit, checkpoint.

Every way of training drives this loop; only its two ports differ:

* a :class:`BatchSource` says where transitions come from -- an env stepped in this process
  (single-process training), worker processes (the local runner, async or in lockstep), or
  ROS 2 subscriptions (the learner node);
* a :class:`WeightSink` says where policy states go -- straight into the in-process worker,
  or through the sharded parameter server to worker processes or ROS 2 topics.

One iteration takes what the source has, ingests it, then runs one gradient update if the
learner owes one. A lockstep source (``blocking``) is asked for data only once the learner
has done ``learner.updates_per_step`` updates per transition, as in single-process SAC. For a
free-running source the update-to-data ratio floats between two bounds: simulated workers are
rate-limited (:meth:`Learner.env_steps_wanted`, the workers' allowance) once the learner
would fall below ``learner.min_updates_per_step`` -- their steps cost the learner nothing but
the ingest, so it gets all the fresh data it can use -- and the learner runs up to
``learner.max_updates_per_step`` updates per transition, so a slow source, such as a
physical arm at 25 Hz, gets every update the learner can do, up to that cap, which rises over
``learner.max_updates_ramp_steps`` (:mod:`.ratio`).

Weights are committed every ``commit_every`` updates for free-running workers, and once a
round, before it is released, for a lockstep source. No policy is published before
``learner.warmup_steps`` transitions arrived: workers act at random until then, and a worker
that starts later (a respawn) gets the current policy at once instead of a warm-up of its own.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import time
from typing import Any, Callable, Mapping, Protocol

from async_rl_ros.core.learning.eval_record import (EVALUATIONS_KEY, pack_evaluations,
                                                    RecordError, unpack_evaluations)
from async_rl_ros.core.learning.evaluation import EpisodeStats, Evaluation
from async_rl_ros.core.learning.learner import Learner
from async_rl_ros.core.learning.metrics import MetricsLogger
from async_rl_ros.core.learning.ratio import updates_allowed
from async_rl_ros.core.records import PolicyState, TransitionBatch
import numpy as np

__all__ = ['Received', 'BatchSource', 'WeightSink', 'Evaluator', 'Evaluation', 'TrainingLoop',
           'LAG_WINDOW']

LAG_WINDOW = 20_000  # transitions in the policy-lag distribution
IDLE_WAIT_S = 0.02   # s an idle loop waits for a batch at most before it looks around again


@dataclasses.dataclass
class Received:
    """
    One batch as a transport hands it to the loop.

    :param batch: the transitions.
    :param worker_id: the worker that sent them.
    :param episodes: metrics of the episodes that worker finished (``charts/*``).
    """

    batch: TransitionBatch
    worker_id: int
    episodes: list[dict[str, float]] = dataclasses.field(default_factory=list)


class BatchSource(Protocol):
    """Where transitions come from."""

    #: lockstep: the loop asks for data only when it owes no update (single process, sync)
    blocking: bool

    def take(self) -> list[Received]:
        """Return the batches that arrived (a lockstep source may wait for its round)."""

    def wait(self, timeout: float) -> None:
        """Block until a batch may be ready to take or ``timeout`` s passed (an idle loop)."""

    def maintain(self, learner: Learner) -> None:
        """Periodic upkeep: respawn dead workers, pass on the rate limit."""

    def metrics(self) -> dict[str, float]:
        """Return the transport's own figures (``transport/*``, ``workers/*``)."""


class WeightSink(Protocol):
    """Where policy states go."""

    def publish(self, state: PolicyState) -> int | None:
        """Send a state; return the version the workers will see, ``None`` if nothing new."""


class Evaluator(Protocol):
    """Scores policy snapshots on fixed seeds without stopping the learner."""

    def submit(self, state: PolicyState) -> bool:
        """Queue a snapshot; return ``False`` if the evaluator is still busy (skipped)."""

    def poll(self) -> list[tuple[int, EpisodeStats]]:
        """Return ``(version, statistics)`` of the evaluations finished since the last call."""


class TrainingLoop:
    """
    Drive a :class:`Learner` from a source to a sink.

    :param learner: the learner.
    :param source: where batches come from.
    :param sink: where policy states go.
    :param commit_every: learner updates between two commits.
    :param logger: metric sink (TensorBoard and history).
    :param stats_interval_s: seconds between two metric reports.
    :param on_report: called with every report (progress bars).
    :param evaluator: scores a snapshot every ``learner.eval_every`` env steps (optional).
    """

    def __init__(self, learner: Learner, source: BatchSource, sink: WeightSink, *,
                 commit_every: int, logger: MetricsLogger, stats_interval_s: float = 2.0,
                 on_report: Callable[[dict[str, float]], None] | None = None,
                 evaluator: Evaluator | None = None):
        self.learner, self.source, self.sink = learner, source, sink
        self.cfg = learner.cfg
        self.commit_every = max(1, int(commit_every))
        self.logger = logger
        self.stats_interval_s = stats_interval_s
        self.on_report = on_report
        self.evaluator = evaluator
        self.evaluations: list[Evaluation] = []
        self._submitted: dict[int, tuple[PolicyState, int]] = {}
        self._next_eval = learner.env_steps + (self.cfg.eval_every or 0)
        self.update_metrics: dict[str, float] = {}
        self.successes: collections.deque[float] = collections.deque(maxlen=50)
        self.episodes = 0
        self.commit_seconds: list[float] = []
        self.published = -1          # version of the last published state
        self.worker_versions: dict[int, int] = {}  # the policy each worker acts with
        self.cosines: dict[int, float] = {}        # its similarity to the current policy
        self._lags: collections.deque[np.ndarray] = collections.deque()
        self._lag_count = 0
        self._updates_since_commit = 0
        self._saved_at = learner.updates
        self._start = (time.monotonic(), learner.env_steps, learner.updates)
        self._last = self._start
        self._last_maintain = 0.0

    # ------------------------------------------------------------------ the loop
    def run(self, should_stop: Callable[[], bool] = lambda: False) -> None:
        """Train until ``learner.total_env_steps`` transitions arrived or ``should_stop()``."""
        self.maybe_publish()
        while self.learner.env_steps < self.cfg.total_env_steps and not should_stop():
            self.step()

    def step(self) -> None:
        """One iteration: upkeep, take and ingest, at most one update, reports."""
        now = time.monotonic()
        if now - self._last_maintain > 0.25:
            self.source.maintain(self.learner)
            self._last_maintain = now
        owed = self.owes_update()
        if not (owed and self.source.blocking):
            if self.source.blocking and self._updates_since_commit:
                self.commit()  # lockstep: workers act with the newest policy
            self.ingest(self.source.take())
            owed = self.owes_update()
        if owed:
            self.update()
        elif not self.source.blocking:
            self.source.wait(IDLE_WAIT_S)  # nothing owed: the next batch, not a clock, wakes it
        if self.evaluator is not None:
            self._evaluate()
        if now - self._last[0] >= self.stats_interval_s:
            self.report()

    def owes_update(self) -> bool:
        """Return whether the learner may update now (data ready, ratio below its cap)."""
        learner = self.learner
        if not learner.ready():
            return False
        updates0, steps0 = learner.ready_at  # the rate limit's origin too
        cfg = self.cfg
        ratio = cfg.updates_per_step if self.source.blocking else cfg.max_updates_per_step
        return learner.updates - updates0 < updates_allowed(ratio, learner.env_steps, steps0,
                                                            cfg.max_updates_ramp_steps)

    def ingest(self, received: list[Received]) -> None:
        """Store batches, record their policy lag and the finished episodes."""
        for item in received:
            acted = np.asarray(item.batch['policy_version']).reshape(-1)
            lag = self.learner.policy_version - acted[acted >= 0]  # < 0: random actions
            if lag.size:
                self.worker_versions[item.worker_id] = int(acted.max())
                self._lags.append(lag)
                self._lag_count += lag.size
                while self._lag_count - self._lags[0].size >= LAG_WINDOW:
                    self._lag_count -= self._lags.popleft().size
            self.learner.ingest(item.batch)
            for episode in item.episodes:
                self.episodes += 1
                self.successes.append(float(episode.get('charts/episode_success', 0.0)))
                self.logger.log(episode, self.learner.env_steps)
        if received:
            self.maybe_publish()

    def update(self) -> None:
        """
        One gradient update; commits and checkpoints when they are due.

        A lockstep loop commits once a round, before it releases the next one
        (:meth:`step`): no worker acts during a round, so a commit inside one would serve
        nobody, and the doctor would compare the round's workers with a version they never
        got (:meth:`Learner.check_policy_divergence`).
        """
        self.update_metrics = self.learner.train_step() or self.update_metrics
        self._updates_since_commit += 1
        if not self.source.blocking and self._updates_since_commit >= self.commit_every:
            self.commit()
        interval = self.cfg.checkpoint.interval_steps
        if interval and self.learner.updates - self._saved_at >= interval:
            self.save_checkpoint()
            self._saved_at = self.learner.updates

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self) -> str:
        """
        Write a learner checkpoint that also holds the evaluator's record; return its path.

        The record is the ``learner.export_candidates`` best-scored snapshots (see
        :mod:`~async_rl_ros.core.learning.eval_record`), so a resumed run still exports the
        best policy of its whole length.
        """
        kept = {id(scored) for scored in self.top_evaluations(self.cfg.export_candidates)}
        record = pack_evaluations([s for s in self.evaluations if id(s) in kept])
        return self.learner.save_checkpoint({EVALUATIONS_KEY: record})

    def restore_evaluations(self, checkpoint: Mapping[str, Any]) -> str:
        """
        Take back the evaluator's record of the checkpoint the learner was resumed from.

        Call it once, after the resume and before training goes on. A record that does not fit
        the learner is dropped whole; the learner's own state was restored either way.

        :param checkpoint: the loaded checkpoint (``Resumed.state``).
        :returns: what happened, in one line for the user.
        """
        if EVALUATIONS_KEY not in checkpoint:
            return ('no evaluated snapshots in the checkpoint (written before they were kept): '
                    'the export is chosen among those scored from now on')
        learner = self.learner
        try:
            restored = unpack_evaluations(checkpoint[EVALUATIONS_KEY],
                                          learner.sac.evaluated_actor.state_dict(),
                                          learner.obs_dim, learner.env_steps)
        except RecordError as exc:
            return (f'evaluated snapshots of the checkpoint dropped ({exc}): the export is '
                    'chosen among those scored from now on')
        self.evaluations[:0] = restored
        if not restored:
            return 'no snapshot had been evaluated before the checkpoint'
        best = self.top_evaluations(1)[0]
        kept = (f'{len(restored)} snapshots evaluated before the checkpoint stay export '
                'candidates' if len(restored) > 1 else
                'the snapshot evaluated before the checkpoint stays an export candidate')
        return (f'{kept} (best: {100 * best.stats.success_rate:.0f} % at {best.env_steps} '
                'env steps)')

    # ------------------------------------------------------------------ weights out
    def maybe_publish(self) -> None:
        """Publish the first policy once warm-up is over (nothing before: workers explore)."""
        if self.published < 0 and self.learner.env_steps >= self.cfg.warmup_steps:
            self.commit()

    def commit(self) -> None:
        """Hand the current policy state to the sink (never before warm-up is over)."""
        self._updates_since_commit = 0
        if self.learner.env_steps < self.cfg.warmup_steps:
            return
        state = self.learner.policy_state()
        if state is None:
            return  # the doctor refuses non-finite weights: workers keep the last good ones
        start = time.perf_counter()
        version = self.sink.publish(state)
        self.commit_seconds.append(time.perf_counter() - start)
        del self.commit_seconds[:-100]
        if version is not None:
            self.learner.published(state, version)
            self.published = int(version)

    # ------------------------------------------------------------------ evaluation
    def _evaluate(self) -> None:
        every = self.cfg.eval_every
        if every and self.published >= 0 and self.learner.env_steps >= self._next_eval:
            state = self.learner.policy_state(evaluated=True)
            if state is not None and self.evaluator.submit(state):
                self._submitted[state.version] = (state, self.learner.env_steps)
                self._next_eval = self.learner.env_steps + every
        for version, stats in self.evaluator.poll():
            state, steps = self._submitted.pop(version, (None, self.learner.env_steps))
            if state is not None:
                self.record_evaluation(state, stats, steps)

    def record_evaluation(self, state: PolicyState | None, stats: EpisodeStats,
                          env_steps: int | None = None) -> Evaluation | None:
        """Log a scored snapshot (``eval/*``), keep it and return it (``None``: no state)."""
        steps = self.learner.env_steps if env_steps is None else env_steps
        self.logger.log({'eval/success_rate': stats.success_rate,
                         f'eval/final_{stats.rank.key}': stats.mean_final,
                         'eval/episodic_return': float(np.mean(stats.returns))
                         if stats.returns else math.nan,
                         'eval/policy_version': float(state.version if state else -1)}, steps)
        if state is None:
            return None
        scored = Evaluation(state, stats, steps)
        self.evaluations.append(scored)
        return scored

    @property
    def best_evaluation(self) -> Evaluation | None:
        """Return the best-scored snapshot (ties: the newer), ``None`` before any."""
        best = self.top_evaluations(1)
        return best[0] if best else None

    def top_evaluations(self, count: int) -> list[Evaluation]:
        """Return the ``count`` best-scored snapshots, best first (one per policy version)."""
        ranked: dict[int, Evaluation] = {}
        for scored in self.evaluations:
            kept = ranked.get(scored.state.version)
            if scored.better_than(kept):
                ranked[scored.state.version] = scored
        order = sorted(enumerate(ranked.values()),
                       key=lambda item: (item[1].stats.ranking(), item[0]), reverse=True)
        return [scored for _, scored in order[:count]]

    # ------------------------------------------------------------------ metrics
    def lag_percentiles(self) -> dict[str, float]:
        """Return the policy lag of the last transitions received (versions behind)."""
        if not self._lags:
            return {}
        acted = np.concatenate(self._lags)
        out = {f'charts/transition_lag_p{q}': float(v)
               for q, v in zip((50, 90, 99), np.percentile(acted, (50, 90, 99)))}
        out['charts/transition_lag_max'] = float(acted.max())
        return out

    @property
    def success_rate(self) -> float:
        """Return the success rate of the last 50 training episodes (0 before any)."""
        return float(np.mean(self.successes)) if self.successes else 0.0

    def report(self) -> dict[str, float]:
        """Log rates, learner, transport and update metrics; return them."""
        now = time.monotonic()
        then, steps, updates = self._last
        dt = max(now - then, 1e-9)
        learner = self.learner
        out = {'charts/samples_per_s': (learner.env_steps - steps) / dt,
               'charts/updates_per_s': (learner.updates - updates) / dt,
               'charts/updates_per_transition': (learner.updates - updates)
               / max(1, learner.env_steps - steps),
               'charts/success_rate_smoothed': self.success_rate}
        if self.commit_seconds:
            out['transport/commit_ms'] = 1e3 * float(np.mean(self.commit_seconds))
        out.update(self.lag_percentiles())
        # The doctor's policy-similarity check: raises the policy regularization when a
        # worker acts with a policy that diverged from the newest one published.
        self.cosines = learner.check_policy_divergence(self.worker_versions)
        out.update(self.source.metrics())
        out.update(self.update_metrics)
        out.update(learner.metrics())
        self.logger.log(out, learner.env_steps)
        self._last = (now, learner.env_steps, learner.updates)
        if self.on_report is not None:
            self.on_report(out)
        return out

    def totals(self) -> dict[str, Any]:
        """Return the whole run's counters and rates (the data of ``summary.json``)."""
        then, steps, updates = self._start
        seconds = max(time.monotonic() - then, 1e-9)
        learner = self.learner
        out: dict[str, Any] = {
            'env_steps': learner.env_steps, 'updates': learner.updates,
            'wall_time_s': round(seconds, 3),
            'samples_per_s': (learner.env_steps - steps) / seconds,
            'updates_per_s': (learner.updates - updates) / seconds,
            'updates_per_transition': (learner.updates - updates)
            / max(1, learner.env_steps - steps),
            'policy_version': learner.policy_version,
            'episodes': self.episodes,
            'training_success_rate_last_50': self.success_rate,
            'evaluations': len(self.evaluations),
            'rejected_transitions': learner.rejected_rows}
        out.update({k.split('/', 1)[1]: v for k, v in self.lag_percentiles().items()})
        return {k: (round(v, 6) if isinstance(v, float) and math.isfinite(v) else v)
                for k, v in out.items()}
