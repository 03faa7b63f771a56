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
Sample efficiency on the simulated UR5 reach task: this learner vs Stable-Baselines3 SAC.

Both train single-process on the same env (the shipped ``config/train.yaml``), for the same
number of env steps, with the same seeds; runs go two at a time, one per core, so they share
the machine alike. Each run is evaluated during training (20 episodes at each fifth of the
budget) and at the end on the same 100 episodes with the deterministic policy. SB3 runs with
its own defaults (batch 256, learning rate 3e-4, automatic temperature).

Usage: ``python bench/sample_efficiency.py [--quick] [--steps N] [--seeds 0 1 2]``; the last
line is a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import time

import numpy as np

EVAL_SEED = 1_000_000


def _evaluate(env, act, episodes: int) -> tuple[float, float]:
    from async_rl_ros.core.learning.evaluation import run_episodes
    stats = run_episodes(env, act, episodes, seed=EVAL_SEED)
    return stats.success_rate, stats.mean_final_distance


def _configs(seed: int, steps: int, batch: int | None):
    from async_rl_ros.core.config import EnvWorkerConfig, LearnerConfig, load_node_config
    from async_rl_ros.local.cli import default_config_path
    path = default_config_path()
    env_cfg = load_node_config(path, 'env_worker', EnvWorkerConfig)
    overrides = {'seed': seed, 'total_env_steps': steps, 'checkpoint.interval_steps': 0,
                 'checkpoint.directory': f'/tmp/async_rl_bench_ckpt_{seed}'}
    if batch:
        overrides['batch.initial_batch'] = batch
    return env_cfg, load_node_config(path, 'learner', LearnerConfig, overrides)


def run_ours(seed: int, steps: int, checkpoints: list[int], episodes: int,
             batch: int | None) -> dict:
    """Train this project's learner; return the curve and the final evaluation."""
    import torch

    from async_rl_ros.core.learning.learner import Learner
    from async_rl_ros.core.learning.single_process import train_single_process
    from async_rl_ros.envs.reach_env import UR5ReachEnv

    torch.set_num_threads(1)
    env_cfg, cfg = _configs(seed, steps, batch)
    env, eval_env = UR5ReachEnv(env_cfg), UR5ReachEnv(env_cfg)
    learner = Learner(cfg, env.observation_space.shape[0], env.action_space.shape[0])
    curve = {}

    def act(obs):
        return learner.act(obs, deterministic=True)

    def on_step(step, _learner):
        if step in checkpoints:
            curve[step] = _evaluate(eval_env, act, 20)[0]

    start = time.perf_counter()
    train_single_process(learner, env, steps, on_step=on_step)
    seconds = time.perf_counter() - start
    success, distance = _evaluate(eval_env, act, episodes)
    return {'impl': 'async_rl_ros', 'seed': seed, 'curve': curve, 'success': success,
            'distance': distance, 'seconds': seconds}


def run_sb3(seed: int, steps: int, checkpoints: list[int], episodes: int,
            batch: int | None) -> dict:
    """Train Stable-Baselines3 SAC with its defaults on the same env."""
    from stable_baselines3 import SAC
    import torch

    from async_rl_ros.envs.reach_env import UR5ReachEnv

    torch.set_num_threads(1)
    env_cfg, _ = _configs(seed, steps, batch)
    env, eval_env = UR5ReachEnv(env_cfg), UR5ReachEnv(env_cfg)
    model = SAC('MlpPolicy', env, seed=seed, verbose=0, device='cpu')

    def act(obs):
        return model.predict(obs, deterministic=True)[0]

    curve, done, start = {}, 0, time.perf_counter()
    for mark in checkpoints:
        model.learn(mark - done, reset_num_timesteps=False)
        done = mark
        curve[mark] = _evaluate(eval_env, act, 20)[0]
    seconds = time.perf_counter() - start
    success, distance = _evaluate(eval_env, act, episodes)
    return {'impl': 'sb3', 'seed': seed, 'curve': curve, 'success': success,
            'distance': distance, 'seconds': seconds}


def _job(args: tuple) -> dict:
    impl, *rest = args
    return (run_ours if impl == 'ours' else run_sb3)(*rest)


def main() -> None:
    """Run every (implementation, seed) pair, two at a time; print the tables and JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--quick', action='store_true', help='3,000 steps, one seed (< 1 min)')
    parser.add_argument('--steps', type=int, default=100_000, help='env steps per run')
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    parser.add_argument('--episodes', type=int, default=100, help='final evaluation episodes')
    parser.add_argument('--batch', type=int, default=None,
                        help='initial batch of this learner (default: the shipped config)')
    parser.add_argument('--jobs', type=int, default=2, help='runs in parallel')
    args = parser.parse_args()
    if args.quick:
        args.steps, args.seeds, args.episodes = 3000, [0], 10
    checkpoints = [args.steps * k // 5 for k in range(1, 6)]
    jobs = [(impl, seed, args.steps, checkpoints, args.episodes, args.batch)
            for seed in args.seeds for impl in ('ours', 'sb3')]
    with mp.get_context('spawn').Pool(args.jobs) as pool:
        results = pool.map(_job, jobs, chunksize=1)

    print(f'\nUR5 reach, single-process SAC, {args.steps} env steps, seeds {args.seeds}')
    print('success rate (20 episodes) at env steps ' + ', '.join(map(str, checkpoints))
          + f'; final: {args.episodes} episodes, deterministic policy')
    header = (f'{"learner":<14}{"seed":>5}  ' + ''.join(f'{c:>8}' for c in checkpoints)
              + f'{"final":>8}{"dist (m)":>10}{"time (s)":>10}')
    print(header)
    print('-' * len(header))
    for r in results:
        print(f'{r["impl"]:<14}{r["seed"]:>5}  '
              + ''.join(f'{r["curve"][c]:>8.2f}' for c in checkpoints)
              + f'{r["success"]:>8.2f}{r["distance"]:>10.4f}{r["seconds"]:>10.0f}')
    summary = {}
    for impl, key in (('async_rl_ros', 'success_rate'), ('sb3', 'sb3_success_rate')):
        runs = [r for r in results if r['impl'] == impl]
        mean = statistics.mean(r['success'] for r in runs)
        dist = statistics.mean(r['distance'] for r in runs)
        curve = [float(np.mean([r['curve'][c] for r in runs])) for c in checkpoints]
        print(f'{impl + " mean":<19}' + ''.join(f'{v:>8.2f}' for v in curve)
              + f'{mean:>8.2f}{dist:>10.4f}')
        summary[key] = round(mean, 3)
    print(json.dumps({'env_steps': args.steps, **summary}))


if __name__ == '__main__':
    main()
