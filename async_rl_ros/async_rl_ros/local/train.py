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
Training runs -- single process, or env-worker processes -- and what a run leaves behind.

TensorBoard logs, a progress bar, periodic and final atomic checkpoints, the learning-curve
PNG and the deterministic policy exported as TorchScript, all under ``log_dir``. SIGINT and
SIGTERM (:class:`~async_rl_ros.local.lifecycle.StopRequest`) and an expected failure such as
``TrainingDiverged`` stop the run (every process) and still write the final checkpoint and
artifacts.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
import sys
import time
from typing import Any

from async_rl_ros.core.config import EnvWorkerConfig, LearnerConfig, LocalRunnerConfig
from async_rl_ros.core.learning.evaluation import EpisodeStats, run_episodes
from async_rl_ros.core.learning.learner import Learner
from async_rl_ros.core.learning.metrics import MetricsLogger, plot_learning_curve
from async_rl_ros.core.learning.resume import resume_learner
from async_rl_ros.core.learning.single_process import train_single_process
from async_rl_ros.local.lifecycle import restore_last_good, stop_scope, StopRun
from async_rl_ros.local.output import Progress, say
from async_rl_ros.local.runner import default_num_workers
import numpy as np
import torch

__all__ = ['TrainResult', 'train', 'train_local']


@dataclasses.dataclass
class TrainResult:
    """What a training run produced."""

    env_steps: int
    updates: int
    seconds: float
    evaluation: EpisodeStats
    checkpoint: str
    policy: Path
    curve: Path
    log_dir: Path
    interrupted: bool
    transport: dict[str, str] = dataclasses.field(default_factory=dict)


def _finish(learner: Learner, eval_env: Any, logger: MetricsLogger, log_dir: Path,
            title: str, episodes: int) -> tuple[str, Path, EpisodeStats, Path]:
    """Write the final checkpoint, the TorchScript policy, the evaluation and the curve."""
    checkpoint = learner.save_checkpoint()
    policy_path = log_dir / 'policy.pt'
    log_dir.mkdir(parents=True, exist_ok=True)
    scripted = torch.jit.script(learner.export_policy())
    tmp = policy_path.with_suffix('.pt.tmp')
    scripted.save(str(tmp))
    tmp.replace(policy_path)  # atomic: a deployed policy is never half written
    evaluation = run_episodes(eval_env, lambda o: learner.act(o, deterministic=True),
                              episodes, seed=1_000_000)
    logger.log({'eval/success_rate': evaluation.success_rate,
                'eval/final_distance': evaluation.mean_final_distance,
                'eval/episodic_return': float(np.mean(evaluation.returns))},
               learner.env_steps)
    curve = plot_learning_curve(logger.history, log_dir / 'learning_curve.png', title=title)
    logger.close()
    return checkpoint, policy_path, evaluation, curve


def _resume(learner: Learner, resume: bool) -> None:
    if resume:  # raises CheckpointError (one line, exit 2 in the CLI) when nothing fits
        found = resume_learner(learner)
        for path, why in found.skipped:
            say(f'checkpoint {path} skipped: {why}')
        say(f'resumed from {found.path} at {learner.env_steps} env steps')


def train(env_cfg: EnvWorkerConfig, cfg: LearnerConfig, *, resume: bool = False,
          progress: bool = True, eval_episodes: int | None = None,
          stop: Any = None) -> TrainResult:
    """
    Train SAC on the simulated reach task in this process.

    :param env_cfg: environment configuration (the ``env_worker`` section).
    :param cfg: learner configuration (the ``learner`` section).
    :param resume: continue from the newest checkpoint in ``checkpoint.directory``.
    :param progress: show a progress bar.
    :param eval_episodes: final evaluation episodes (default: ``cfg.eval_episodes``).
    :param stop: a :class:`~async_rl_ros.local.lifecycle.StopRequest` (default: one that
        handles SIGINT and SIGTERM during the run).
    """
    from async_rl_ros.envs.reach_env import UR5ReachEnv

    log_dir = Path(cfg.log_dir)
    torch.set_num_threads(1)  # the env shares the machine; one BLAS thread is faster here
    env, eval_env = UR5ReachEnv(env_cfg), UR5ReachEnv(env_cfg)
    learner = Learner(cfg, env.observation_space.shape[0], env.action_space.shape[0])
    _resume(learner, resume)
    remaining = max(0, cfg.total_env_steps - learner.env_steps)
    logger = MetricsLogger(log_dir / 'tensorboard')
    start = time.perf_counter()
    bar = Progress(total=remaining, desc='training', unit='step', enabled=progress)
    interval = cfg.checkpoint.interval_steps  # learner updates between checkpoints
    saved = [learner.updates]

    with stop_scope(stop) as flag:
        def on_step(step: int, lrn: Learner) -> None:
            bar.update(1)
            if step % 200 == 0:
                bar.set_postfix(success=f'{logger.last("charts/success_rate", 0.0):.2f}',
                                eval=f'{logger.last("eval/success_rate", 0.0):.2f}',
                                updates=lrn.updates, batch=lrn.batch_sizer.batch_size)
            if interval and lrn.updates - saved[0] >= interval:
                lrn.save_checkpoint()
                saved[0] = lrn.updates
            if flag():
                raise StopRun

        try:
            with flag.contain(lambda exc: restore_last_good(learner, flag)):
                train_single_process(learner, env, remaining, logger=logger,
                                     eval_env=eval_env, eval_every=cfg.eval_every,
                                     eval_episodes=min(cfg.eval_episodes, 20), on_step=on_step)
        except StopRun:
            pass
        finally:
            bar.close()
        interrupted = flag.requested
    seconds = time.perf_counter() - start
    checkpoint, policy, evaluation, curve = _finish(
        learner, eval_env, logger, log_dir, f'UR5 reach, SAC single process, seed {cfg.seed}',
        eval_episodes or cfg.eval_episodes)
    env.close()
    eval_env.close()
    return TrainResult(env_steps=learner.env_steps, updates=learner.updates, seconds=seconds,
                       evaluation=evaluation, checkpoint=checkpoint, policy=policy,
                       curve=curve, log_dir=log_dir, interrupted=interrupted)


def train_local(env_cfg: EnvWorkerConfig, cfg: LearnerConfig, runner_cfg: LocalRunnerConfig,
                *, resume: bool = False, progress: bool = True,
                eval_episodes: int | None = None, stop: Any = None) -> TrainResult:
    """
    Train with env-worker processes (``local_runner.mode``: async or sync).

    Same artifacts as :func:`train`; the progress bar shows env steps, success rate,
    samples/s, updates/s and the policy lag.
    """
    from async_rl_ros.envs.reach_env import UR5ReachEnv
    from async_rl_ros.local.runner import LocalRunner

    log_dir = Path(cfg.log_dir)
    torch.set_num_threads(1)
    logger = MetricsLogger(log_dir / 'tensorboard')
    runner = LocalRunner(env_cfg, cfg, runner_cfg)
    learner = runner.learner
    try:
        _resume(learner, resume)
    except BaseException:
        runner.board.close()  # no worker started yet: only the shared memory to give back
        raise
    if runner.num_workers > default_num_workers() + 1:
        print(f'warning: {runner.num_workers} workers on {default_num_workers() + 1} physical '
              'cores: context switches will cost throughput', file=sys.stderr)
    bar = Progress(total=cfg.total_env_steps, initial=learner.env_steps, desc=runner_cfg.mode,
                   unit='step', enabled=progress, interval_s=runner_cfg.stats_interval_s)
    episodes: list[float] = []
    state = {'time': time.perf_counter(), 'steps': learner.env_steps,
             'updates': learner.updates, 'saved': learner.updates,
             'steps0': learner.env_steps, 'updates0': learner.updates}
    start = time.perf_counter()

    def on_tick(run: LocalRunner, final: bool = False) -> None:
        now = time.perf_counter()
        bar.update(learner.env_steps - bar.n)
        if now - state['time'] < runner_cfg.stats_interval_s and not final:
            return
        for m in run.take_episode_metrics():
            logger.log(m, learner.env_steps)
            episodes.append(m['charts/success_rate'])
        dt = now - state['time']
        rates = {'charts/samples_per_s': (learner.env_steps - state['steps']) / dt,
                 'charts/updates_per_s': (learner.updates - state['updates']) / dt}
        transport = run.metrics()
        logger.log({**rates, **transport, **run.worker_rates(), **run.update_metrics,
                    **learner.metrics()}, learner.env_steps)
        state.update(time=now, steps=learner.env_steps, updates=learner.updates)
        bar.set_postfix(success=f'{episodes[-1] if episodes else 0.0:.2f}',
                        samples_s=f'{rates["charts/samples_per_s"]:.0f}',
                        updates_s=f'{rates["charts/updates_per_s"]:.0f}',
                        lag=f'{transport.get("charts/transition_lag_p50", 0.0):.0f}')
        interval = cfg.checkpoint.interval_steps
        if interval and learner.updates - state['saved'] >= interval:
            learner.save_checkpoint()
            state['saved'] = learner.updates

    with stop_scope(stop) as flag:
        with flag.contain(lambda exc: restore_last_good(learner, flag)):
            runner.run(should_stop=flag, on_tick=on_tick)
        interrupted = flag.requested
    on_tick(runner, final=True)  # the last metrics, however short the run
    bar.close()
    seconds = time.perf_counter() - start
    transport = runner.metrics()
    summary = {
        'mode': f'{runner_cfg.mode}, worker processes: {runner.num_workers}',
        'samples/s, updates/s': f'{(learner.env_steps - state["steps0"]) / seconds:.0f}, '
                                f'{(learner.updates - state["updates0"]) / seconds:.1f}',
        'policy lag p50 / p99 / max': ' / '.join(
            f'{transport.get(f"charts/transition_lag_{k}", 0.0):.0f}'
            for k in ('p50', 'p99', 'max')) + ' versions',
        'dropped batches, rejected packets, respawns': ', '.join(
            f'{transport[k]:.0f}' for k in ('transport/dropped_batches',
                                            'transport/rejected_packets',
                                            'transport/respawns'))}
    eval_env = UR5ReachEnv(env_cfg)
    checkpoint, policy, evaluation, curve = _finish(
        learner, eval_env, logger, log_dir,
        f'UR5 reach, SAC {runner_cfg.mode}, {runner.num_workers} worker'
        f'{"s" if runner.num_workers > 1 else ""}, seed {cfg.seed}',
        eval_episodes or cfg.eval_episodes)
    eval_env.close()
    return TrainResult(env_steps=learner.env_steps, updates=learner.updates, seconds=seconds,
                       evaluation=evaluation, checkpoint=checkpoint, policy=policy,
                       curve=curve, log_dir=log_dir, interrupted=interrupted,
                       transport=summary)
