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
Training runs without ROS: the training loop driven in one process or with worker processes.

``single``: the learner steps one environment itself (:class:`InlineWorker`), evaluating
snapshots inline. ``async`` / ``sync``: env-worker processes (:class:`LocalTransport`) and an
evaluator process. Either way the same :class:`TrainingLoop` trains and the same artifacts
come out in the run's folder under ``learner.log_dir`` (:mod:`run_folder`): TensorBoard logs,
checkpoints, ``policy.pt`` (the best evaluated policy), ``learning_curve.png``,
``metrics.jsonl`` and ``summary.json``. SIGINT and SIGTERM
(:class:`~async_rl_ros.local.lifecycle.StopRequest`) and an expected failure such as
``TrainingDiverged`` stop the run (every process) and still write the final checkpoint and
the artifacts.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
import time
from typing import Any, Callable

from async_rl_ros.core.config import EnvWorkerConfig, LearnerConfig, LocalRunnerConfig
from async_rl_ros.core.learning.artifacts import finish_run, RunResult
from async_rl_ros.core.learning.evaluation import EpisodeStats
from async_rl_ros.core.learning.learner import Learner
from async_rl_ros.core.learning.loop import TrainingLoop
from async_rl_ros.core.learning.metrics import MetricsLogger, RECORD
from async_rl_ros.core.learning.resume import replay_note, resume_learner, Resumed
from async_rl_ros.core.learning.run_folder import open_run, RunFolder
from async_rl_ros.core.workers.inline import final_evaluation, InlineWorker, PolicyEvaluator
from async_rl_ros.envs.factory import build_worker, evaluation_env
from async_rl_ros.local.lifecycle import restore_last_good, stop_scope, StopRequest
from async_rl_ros.local.output import Progress, say
import torch

__all__ = ['TrainResult', 'LocalRun', 'train']


@dataclasses.dataclass
class TrainResult:
    """What a training run produced (the files are described in :mod:`artifacts`)."""

    run: RunResult
    evaluation: EpisodeStats
    interrupted: bool

    @property
    def summary(self) -> dict[str, Any]:
        """Return the data of ``summary.json``."""
        return self.run.summary


def _resume(run: LocalRun, folder: RunFolder) -> None:
    learner, found = run.learner, run.resumed
    if found is not None:
        for path, why in found.skipped:
            say(f'checkpoint {path} skipped: {why}')
        say(f'resumed from {found.path} at {learner.env_steps} env steps (run folder '
            f'{folder.path})')
        say(replay_note(learner))
        say(run.record_note)
    else:
        say(f'run folder: {folder.path}')
    # The curve of a resumed run covers its earlier part too (up to the checkpoint).
    run.loop.logger.record_to(folder.path / RECORD,
                              learner.env_steps if folder.resumed else None)


class LocalRun:
    """
    A learner with its source, sink and evaluator, wired into the training loop.

    What ``async-rl-train`` runs, and what the benchmarks and tests measure.

    :param env_cfg: environment configuration (the ``env_worker`` section).
    :param cfg: learner configuration (the ``learner`` section).
    :param runner_cfg: the ``local_runner`` section; its ``mode`` picks ``single`` (one
        process), ``async`` or ``sync`` (worker processes).
    :param logger: metric sink (default: TensorBoard under ``learner.log_dir``).
    :param evaluate: score snapshots every ``learner.eval_every`` env steps.
    :param resume: restore the learner from the newest usable checkpoint of
        ``learner.checkpoint.directory`` (and the evaluator's record of it) before any state
        is handed out, so the policy versions go on from the checkpoint's.
    :raises CheckpointError: ``resume`` and no checkpoint fits (one line).
    """

    def __init__(self, env_cfg: EnvWorkerConfig, cfg: LearnerConfig,
                 runner_cfg: LocalRunnerConfig, *, logger: MetricsLogger | None = None,
                 evaluate: bool = True, resume: bool = False):
        from async_rl_ros.local.evaluator import EvaluatorProcess
        from async_rl_ros.local.runner import LocalTransport

        self.env_cfg, self.cfg, self.runner_cfg = env_cfg, cfg, runner_cfg
        self.mode = runner_cfg.mode
        torch.set_num_threads(1)  # the envs share the machine; one BLAS thread is faster here
        # The task is resolved (and its configuration checked) before any process starts.
        self.eval_env, self.spec = evaluation_env(env_cfg)
        spec = self.spec
        self.learner = Learner(cfg, spec.obs_dim, spec.act_dim, goal_spec=spec.goal,
                               task=spec.name)
        #: what ``resume`` loaded (``None``: a fresh run)
        self.resumed: Resumed | None = None
        if resume:
            try:
                self.resumed = resume_learner(self.learner)
            except BaseException:
                self.eval_env.close()
                raise
        self.transport: Any = None
        self._envs: list[Any] = [self.eval_env]
        self._stoppers: list[Callable[[], None]] = []
        evaluator: Any = None
        if self.mode == 'single':
            inline = InlineWorker(build_worker(env_cfg, 0, cfg.sac.hidden_sizes, 1).worker,
                                  self.learner.policy_state(), runner_cfg.parameter_server,
                                  runner_cfg.codec)
            self._envs.append(inline.worker.env)
            source: Any = inline
            if evaluate:
                evaluator = PolicyEvaluator(self.eval_env, cfg.sac.hidden_sizes,
                                            cfg.eval_episodes, rank=spec.rank)
            self.title = f'{spec.name}, SAC single process, seed {cfg.seed}'
            commit_every = 1  # the actor acts with every update at once
        else:
            self.transport = source = LocalTransport(env_cfg, cfg, runner_cfg,
                                                     self.learner.policy_state())
            self._stoppers.append(self.transport.shutdown)
            if evaluate:
                evaluator = EvaluatorProcess(env_cfg, cfg.sac.hidden_sizes, cfg.eval_episodes)
                self._stoppers.append(evaluator.close)
            workers = self.transport.num_workers
            self.title = (f'{spec.name}, SAC {self.mode}, {workers} worker'
                          f'{"s" if workers > 1 else ""}, seed {cfg.seed}')
            commit_every = runner_cfg.parameter_server.commit_every
        self.source = source
        self.loop = TrainingLoop(
            self.learner, source, source, commit_every=commit_every,
            logger=logger if logger is not None else MetricsLogger(
                Path(cfg.log_dir) / 'tensorboard'),
            stats_interval_s=runner_cfg.stats_interval_s, evaluator=evaluator)
        #: what became of the resumed checkpoint's evaluated snapshots, in words
        self.record_note = (self.loop.restore_evaluations(self.resumed.state)
                            if self.resumed is not None else '')

    def run(self, should_stop: Callable[[], bool] = lambda: False) -> None:
        """Train until the budget or ``should_stop()``; then stop every process."""
        try:
            if self.transport is not None:
                self.transport.start(self.learner, should_stop)
            self.loop.run(should_stop)
            self.loop.report()  # the last metrics, however short the run
        finally:
            self.stop_processes()

    def stop_processes(self) -> None:
        """Stop the workers, the shards and the evaluator (idempotent)."""
        while self._stoppers:
            self._stoppers.pop(0)()

    def finish(self, extra: dict[str, Any], skip_evaluation: str = '',
               should_stop: Callable[[], bool] | None = None
               ) -> tuple[RunResult, EpisodeStats]:
        """
        Score the last policy, export the best, evaluate it on held-out episodes.

        :param extra: more summary entries.
        :param skip_evaluation: why the final evaluation is skipped (see ``finish_run``).
        :param should_stop: a stop request that cuts the final evaluation short.
        """
        extra = {'mode': self.mode, **self.spec.describe(), **extra}
        extra.update(self.source.summary())  # workers, weights received
        evaluate = final_evaluation(self.eval_env, self.cfg, self.spec.rank, should_stop)
        run = finish_run(self.loop, Path(self.cfg.log_dir), title=self.title,
                         evaluate=evaluate, extra=extra, rank=self.spec.rank,
                         skip_evaluation=skip_evaluation)
        return run, run.evaluation or EpisodeStats()

    def close(self) -> None:
        """Stop every process and close the environments."""
        self.stop_processes()
        while self._envs:
            self._envs.pop().close()


def train(env_cfg: EnvWorkerConfig, cfg: LearnerConfig,
          runner_cfg: LocalRunnerConfig | None = None, *, resume: str | None = None,
          progress: bool = True, stop: StopRequest | None = None) -> TrainResult:
    """
    Train SAC on the task of ``env_cfg.task.name`` (``local_runner.mode``: single, async, sync).

    :param env_cfg: environment configuration (the ``env_worker`` section).
    :param cfg: learner configuration (the ``learner`` section).
    :param runner_cfg: the ``local_runner`` section.
    :param resume: ``None``: a new run folder under ``cfg.log_dir``; ``'latest'`` or a run's
        folder name: continue that run from its newest usable checkpoint, in its folder.
    :param progress: show a progress bar.
    :param stop: a :class:`~async_rl_ros.local.lifecycle.StopRequest` (default: one that
        handles SIGINT and SIGTERM during the run).
    """
    runner_cfg = runner_cfg or LocalRunnerConfig()
    # What the run folder keeps, for a resume: the sections as given (the folder's own paths
    # follow from them).
    given = {'env_worker': env_cfg, 'learner': cfg, 'local_runner': runner_cfg}
    folder, cfg = open_run(cfg, resume)  # locked until the process ends (or close below)
    try:
        return _train_in(folder, env_cfg, cfg, runner_cfg, resume is not None, progress, stop,
                         given)
    except BaseException:
        folder.abandon()  # a start refused before the run wrote anything leaves no folder
        raise
    finally:
        folder.close()


def _train_in(folder: RunFolder, env_cfg: EnvWorkerConfig, cfg: LearnerConfig,
              runner_cfg: LocalRunnerConfig, resume: bool, progress: bool,
              stop: StopRequest | None, given: dict) -> TrainResult:
    # --resume raises CheckpointError (one line, exit 2 in the CLI) when nothing fits.
    run = LocalRun(env_cfg, cfg, runner_cfg, resume=resume)
    try:
        learner, loop = run.learner, run.loop
        _resume(run, folder)
        folder.save_config(given)  # once the checkpoint fits: a refused resume changes nothing
        bar = Progress(total=cfg.total_env_steps, initial=learner.env_steps, desc=run.mode,
                       unit='step', enabled=progress, interval_s=runner_cfg.stats_interval_s)

        def on_report(metrics: dict[str, float]) -> None:
            bar.update(learner.env_steps - bar.n)
            bar.set_postfix(success=f'{loop.success_rate:.2f}',
                            eval=f'{loop.logger.last("eval/success_rate", 0.0):.2f}',
                            samples_s=f'{metrics["charts/samples_per_s"]:.0f}',
                            updates_s=f'{metrics["charts/updates_per_s"]:.0f}',
                            lag=f'{metrics.get("charts/transition_lag_p50", 0.0):.0f}')

        loop.on_report = on_report
        start = time.perf_counter()
        with stop_scope(stop) as flag:
            try:
                # An expected failure (training diverged, a robot that needs a person) is
                # recorded, the last good state restored, and everything saved as after Ctrl-C.
                with flag.contain(lambda exc: restore_last_good(learner, flag)):
                    run.run(should_stop=flag)
            finally:
                bar.close()
            interrupted = flag.requested or flag.failure is not None
            # A stop signal wants the process gone within seconds (docker stop: 10 s); one
            # that arrives during the final evaluation cuts it short (an episode at most).
            signalled = (flag.reason or '') if flag.signum else ''
            result, evaluation = run.finish(
                {'interrupted': interrupted,
                 'seconds_training': round(time.perf_counter() - start, 3)}, signalled,
                should_stop=lambda: flag.signum is not None)
    finally:
        run.close()
    return TrainResult(run=result, evaluation=evaluation, interrupted=interrupted)
