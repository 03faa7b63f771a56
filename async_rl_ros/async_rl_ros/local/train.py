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
Single-process SAC training with everything a run leaves behind.

TensorBoard logs, a progress bar, periodic and final atomic checkpoints, the learning-curve
PNG and the deterministic policy exported as TorchScript, all under ``log_dir``. Ctrl-C stops
after the current step and still writes the final checkpoint and artifacts.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
import signal
import sys
import time
from typing import Any

from async_rl_ros.core.config import EnvWorkerConfig, LearnerConfig
from async_rl_ros.core.evaluation import EpisodeStats, run_episodes
from async_rl_ros.core.learner import Learner
from async_rl_ros.core.metrics import MetricsLogger, plot_learning_curve
from async_rl_ros.core.single_process import train_single_process
import torch

__all__ = ['TrainResult', 'train']


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


def train(env_cfg: EnvWorkerConfig, cfg: LearnerConfig, *, resume: bool = False,
          progress: bool = True, eval_episodes: int | None = None) -> TrainResult:
    """
    Train SAC on the simulated reach task in this process.

    :param env_cfg: environment configuration (the ``env_worker`` section).
    :param cfg: learner configuration (the ``learner`` section).
    :param resume: continue from the newest checkpoint in ``checkpoint.directory``.
    :param progress: show a progress bar.
    :param eval_episodes: final evaluation episodes (default: ``cfg.eval_episodes``).
    """
    from tqdm import tqdm

    from async_rl_ros.envs.reach_env import UR5ReachEnv

    log_dir = Path(cfg.log_dir)
    torch.set_num_threads(1)  # the env shares the machine; one BLAS thread is faster here
    env, eval_env = UR5ReachEnv(env_cfg), UR5ReachEnv(env_cfg)
    learner = Learner(cfg, env.observation_space.shape[0], env.action_space.shape[0])
    if resume and learner.resume() is not None:
        print(f'resumed from {learner.checkpoints.latest()} at {learner.env_steps} env steps',
              file=sys.stderr)
    remaining = max(0, cfg.total_env_steps - learner.env_steps)
    logger = MetricsLogger(log_dir / 'tensorboard')
    start = time.perf_counter()
    bar = tqdm(total=remaining, desc='training', unit='step', disable=not progress,
               dynamic_ncols=True, smoothing=0.05)
    interval = cfg.checkpoint.interval_steps  # learner updates between checkpoints
    saved = [learner.updates]

    with _StopFlag() as flag:
        def on_step(step: int, lrn: Learner) -> None:
            bar.update(1)
            if step % 200 == 0:
                bar.set_postfix(success=f'{logger.last("charts/success_rate", 0.0):.2f}',
                                eval=f'{logger.last("eval/success_rate", 0.0):.2f}',
                                updates=lrn.updates, batch=lrn.batch_sizer.batch_size)
            if interval and lrn.updates - saved[0] >= interval:
                lrn.save_checkpoint()
                saved[0] = lrn.updates
            if flag.stop:
                raise KeyboardInterrupt

        interrupted = False
        try:
            train_single_process(learner, env, remaining, logger=logger, eval_env=eval_env,
                                 eval_every=cfg.eval_every,
                                 eval_episodes=min(cfg.eval_episodes, 20), on_step=on_step)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            bar.close()
    seconds = time.perf_counter() - start
    checkpoint = learner.save_checkpoint()
    policy_path = log_dir / 'policy.pt'
    scripted = torch.jit.script(learner.export_policy())
    tmp = policy_path.with_suffix('.pt.tmp')
    scripted.save(str(tmp))
    tmp.replace(policy_path)
    evaluation = run_episodes(eval_env, lambda o: learner.act(o, deterministic=True),
                              eval_episodes or cfg.eval_episodes, seed=1_000_000)
    logger.log({'eval/success_rate': evaluation.success_rate,
                'eval/final_distance': evaluation.mean_final_distance}, learner.env_steps)
    curve = plot_learning_curve(logger.history, log_dir / 'learning_curve.png',
                                title=f'UR5 reach, SAC single process, seed {cfg.seed}')
    logger.close()
    env.close()
    eval_env.close()
    return TrainResult(env_steps=learner.env_steps, updates=learner.updates, seconds=seconds,
                       evaluation=evaluation, checkpoint=checkpoint, policy=policy_path,
                       curve=curve, log_dir=log_dir, interrupted=interrupted)
