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
come out under ``learner.log_dir``: TensorBoard logs, checkpoints, ``policy.pt`` (the best
evaluated policy), ``learning_curve.png`` and ``summary.json``. Ctrl-C stops the run (every
process) and still writes the final checkpoint and artifacts.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
import signal
import sys
import time
from typing import Any

from async_rl_ros.core.config import EnvWorkerConfig, LearnerConfig, LocalRunnerConfig
from async_rl_ros.core.learning.artifacts import finish_run, RunResult
from async_rl_ros.core.learning.evaluation import EpisodeStats
from async_rl_ros.core.learning.learner import Learner
from async_rl_ros.core.learning.loop import TrainingLoop
from async_rl_ros.core.learning.metrics import MetricsLogger
from async_rl_ros.core.workers.inline import InlineWorker, PolicyEvaluator
from async_rl_ros.core.workers.runtime import build_worker
import torch

__all__ = ['TrainResult', 'train']


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


class _StopFlag:
    """Turn the first SIGINT into a request to stop cleanly (the second one is fatal)."""

    def __init__(self):
        self.stop = False
        self._previous = None

    def __enter__(self) -> '_StopFlag':
        self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.stop = True
        signal.signal(signal.SIGINT, self._previous)  # a second Ctrl-C interrupts at once
        print('\nstopping after this step: writing the final checkpoint ...', file=sys.stderr)

    def __exit__(self, *exc: Any) -> None:
        signal.signal(signal.SIGINT, self._previous)


def _resume(learner: Learner, resume: bool) -> None:
    if resume and learner.resume() is not None:
        print(f'resumed from {learner.checkpoints.latest()} at {learner.env_steps} env steps',
              file=sys.stderr)


def train(env_cfg: EnvWorkerConfig, cfg: LearnerConfig,
          runner_cfg: LocalRunnerConfig | None = None, *, mode: str = 'single',
          resume: bool = False, progress: bool = True,
          eval_episodes: int | None = None) -> TrainResult:
    """
    Train SAC on the reach task with the training loop.

    :param env_cfg: environment configuration (the ``env_worker`` section).
    :param cfg: learner configuration (the ``learner`` section).
    :param runner_cfg: the ``local_runner`` section (worker processes; async and sync).
    :param mode: ``single`` (one process), ``async`` or ``sync`` (worker processes).
    :param resume: continue from the newest checkpoint in ``checkpoint.directory``.
    :param progress: show a progress bar.
    :param eval_episodes: final evaluation episodes (default: ``cfg.eval_episodes``).
    """
    from tqdm import tqdm

    from async_rl_ros.local.evaluator import EvaluatorProcess
    from async_rl_ros.local.runner import LocalTransport

    runner_cfg = runner_cfg or LocalRunnerConfig()
    log_dir = Path(cfg.log_dir)
    torch.set_num_threads(1)  # the envs share the machine; one BLAS thread is faster here
    eval_built = build_worker(env_cfg.replace(backend='sim'), 0, cfg.sac.hidden_sizes, 1)
    eval_env = eval_built.env
    obs_dim = eval_env.observation_space.shape[0]
    act_dim = eval_env.action_space.shape[0]
    learner = Learner(cfg, obs_dim, act_dim)
    _resume(learner, resume)
    logger = MetricsLogger(log_dir / 'tensorboard')
    envs: list[Any] = [eval_env]
    stoppers: list[Any] = []
    transport = None
    if mode == 'single':
        inline = InlineWorker(build_worker(env_cfg, 0, cfg.sac.hidden_sizes, 1).worker)
        envs.append(inline.worker.env)
        source: Any = inline
        evaluator: Any = PolicyEvaluator(eval_env, cfg.sac.hidden_sizes,
                                         min(cfg.eval_episodes, 20))
        title = f'UR5 reach, SAC single process, seed {cfg.seed}'
        commit_every = 1  # the actor acts with every update at once
    else:
        runner_cfg = runner_cfg.replace(mode=mode)
        transport = LocalTransport(env_cfg, cfg, runner_cfg, learner.policy_state())
        evaluator = EvaluatorProcess(env_cfg, cfg.sac.hidden_sizes, cfg.eval_episodes)
        stoppers = [transport.shutdown, evaluator.close]
        source = transport
        workers = transport.num_workers
        title = (f'UR5 reach, SAC {mode}, {workers} worker{"s" if workers > 1 else ""}, '
                 f'seed {cfg.seed}')
        commit_every = runner_cfg.parameter_server.commit_every
    bar = tqdm(total=cfg.total_env_steps, initial=learner.env_steps, desc=mode, unit='step',
               disable=not progress, dynamic_ncols=True, smoothing=0.05)

    def on_report(metrics: dict[str, float]) -> None:
        bar.update(learner.env_steps - bar.n)
        bar.set_postfix(success=f'{loop.success_rate:.2f}',
                        eval=f'{loop.logger.last("eval/success_rate", 0.0):.2f}',
                        samples_s=f'{metrics["charts/samples_per_s"]:.0f}',
                        updates_s=f'{metrics["charts/updates_per_s"]:.0f}',
                        lag=f'{metrics.get("charts/transition_lag_p50", 0.0):.0f}')

    loop = TrainingLoop(learner, source, source, commit_every=commit_every, logger=logger,
                        stats_interval_s=runner_cfg.stats_interval_s, on_report=on_report,
                        evaluator=evaluator)
    start = time.perf_counter()
    try:
        with _StopFlag() as flag:
            if transport is not None:
                transport.start(learner)
            loop.run(should_stop=lambda: flag.stop)
            interrupted = flag.stop
        loop.report()  # the last metrics, however short the run
    finally:
        bar.close()
        for stop in stoppers:
            stop()
    try:
        state = learner.policy_state()
        evaluation = PolicyEvaluator(eval_env, cfg.sac.hidden_sizes,
                                     eval_episodes or cfg.eval_episodes).score(state) \
            if state is not None else EpisodeStats()
        extra = {'mode': mode, 'interrupted': interrupted,
                 'seconds_training': round(time.perf_counter() - start, 3)}
        if transport is not None:
            extra.update(transport.summary())
        run = finish_run(loop, log_dir, title=title, final_evaluation=evaluation, extra=extra)
    finally:
        for env in envs:
            env.close()
    return TrainResult(run=run, evaluation=evaluation, interrupted=interrupted)
