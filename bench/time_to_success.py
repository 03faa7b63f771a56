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
Wall-clock time to 95 % success on the UR5 reach task: async, sync and Stable-Baselines3 SAC.

Each setting trains alone on the machine (one after the other): async and sync as
``async-rl-train`` runs them (shipped defaults, their evaluator process included) for at most
``--budget-s``, SB3 SAC (its defaults, torch threads on every core) for at most
``--sb3-budget-s`` (default three times as long, so that a "3x faster" can be seen).
Evaluation must not stop the clock it measures, so training only snapshots the policy every
``--snapshot-s`` seconds (a copy of the policy the run's evaluator would score -- the averaged
actor, with the shipped ``sac.policy_average_tau`` and ``sac.policy_average_fraction`` --
milliseconds); after training, every snapshot is evaluated on the same episodes with the
deterministic policy, and the time to success is the wall-clock time of the first snapshot
reaching the threshold. Each setting's updates/s and env steps/s over its whole budget are
printed beside it.

Usage: ``python bench/time_to_success.py [--quick] [--workers W] [--budget-s S]
[--sb3-budget-s S] [--seed N]``; the last line is a JSON summary (``null`` where a setting
did not reach the threshold in its budget; ``speedup_vs_sb3_at_least`` then bounds the
speed-up by SB3's budget).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import time

EVAL_SEED = 2_000_000


def _success(act, episodes: int) -> float:
    from async_rl_ros.core.learning.evaluation import run_episodes
    from async_rl_ros.envs.reach_env import make_reach_env

    env = make_reach_env()
    try:
        return run_episodes(env, act, episodes, seed=EVAL_SEED).success_rate
    finally:
        env.close()


def _configs(budget_steps: int, seed: int):
    from async_rl_ros.core.config import (EnvWorkerConfig, LearnerConfig, load_node_config,
                                          LocalRunnerConfig)
    from async_rl_ros.local.cli import default_config_path
    path = default_config_path()
    cfg = load_node_config(path, 'learner', LearnerConfig, {
        'seed': seed, 'total_env_steps': budget_steps, 'batch.initial_batch': 256,
        'checkpoint.directory': '/tmp/async_rl_bench_tts'})
    return (load_node_config(path, 'env_worker', EnvWorkerConfig, {'seed': seed}), cfg,
            load_node_config(path, 'local_runner', LocalRunnerConfig))


def run_runner(mode: str, workers: int, budget_s: float, snapshot_s: float, seed: int = 0
               ) -> tuple[list[tuple[float, object]], dict[str, float]]:
    """
    Train as ``async-rl-train`` does (shipped defaults).

    :returns: timed policy snapshots, and the run's updates/s and env steps/s.
    """
    from async_rl_ros.core.learning.metrics import MetricsLogger
    from async_rl_ros.local.train import LocalRun

    env_cfg, cfg, rcfg = _configs(10**9, seed)
    run = LocalRun(env_cfg, cfg, rcfg.replace(mode=mode, num_workers=workers),
                   logger=MetricsLogger())
    snapshots: list[tuple[float, object]] = []
    start = time.perf_counter()

    def stop() -> bool:
        elapsed = time.perf_counter() - start
        last = snapshots[-1][0] if snapshots else 0.0
        if run.learner.updates and elapsed - last > snapshot_s:
            state = run.learner.policy_state(evaluated=True)
            if state is not None:
                snapshots.append((elapsed, state))
        return elapsed > budget_s

    try:
        run.run(should_stop=stop)
        elapsed = time.perf_counter() - start  # the training, not the shutdown
    finally:
        run.close()
    rates = {'updates_per_s': run.learner.updates / elapsed,
             'env_steps_per_s': run.learner.env_steps / elapsed}
    return [(t, run.learner.policy_from_state(s)) for t, s in snapshots], rates


def run_sb3(budget_s: float, snapshot_s: float, seed: int = 0
            ) -> tuple[list[tuple[float, object]], dict[str, float]]:
    """
    Train SB3 SAC (its defaults) on the same env.

    :returns: timed policy snapshots, and the run's updates/s and env steps/s.
    """
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback
    import torch

    from async_rl_ros.envs.reach_env import make_reach_env

    torch.set_num_threads(os.cpu_count() or 1)  # alone on the machine: every core
    model = SAC('MlpPolicy', make_reach_env(seed=seed), seed=seed, verbose=0, device='cpu')
    snapshots: list[tuple[float, object]] = []
    start = time.perf_counter()

    class Snapshot(BaseCallback):

        def _on_step(self) -> bool:
            elapsed = time.perf_counter() - start
            if elapsed - (snapshots[-1][0] if snapshots else 0) > snapshot_s:
                snapshots.append((elapsed, copy.deepcopy(model.policy.actor.state_dict())))
            return elapsed < budget_s

    model.learn(10**9, callback=Snapshot())
    elapsed = time.perf_counter() - start
    rates = {'updates_per_s': model._n_updates / elapsed,
             'env_steps_per_s': model.num_timesteps / elapsed}

    def policy(state):
        clone = copy.deepcopy(model.policy)
        clone.actor.load_state_dict(state)
        return lambda obs: clone.predict(obs, deterministic=True)[0]

    return [(t, policy(s)) for t, s in snapshots], rates


def time_to(snapshots, threshold: float, episodes: int, act_of) -> tuple[float | None, list]:
    """Evaluate snapshots in time order; return the first time at ``threshold`` and a curve."""
    curve = []
    for seconds, policy in snapshots:
        rate = _success(act_of(policy), episodes)
        curve.append((seconds, rate))
        if rate >= threshold:
            return seconds, curve
    return None, curve


def main() -> None:
    """Run the three settings one after the other and print the table and JSON."""
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--quick', action='store_true',
                        help='12 s per setting (about a minute): a smoke run, not a figure')
    parser.add_argument('--workers', type=int, default=0,
                        help='worker processes for async/sync (0: the default, physical cores '
                        '- 1)')
    parser.add_argument('--budget-s', type=float, default=600.0, help='async and sync each')
    parser.add_argument('--sb3-budget-s', type=float, default=None,
                        help='SB3 SAC (default: 3 x --budget-s)')
    parser.add_argument('--snapshot-s', type=float, default=20.0)
    parser.add_argument('--episodes', type=int, default=40, help='per snapshot evaluation')
    parser.add_argument('--threshold', type=float, default=0.95)
    parser.add_argument('--seed', type=int, default=0, help='env, learner and SB3 seed')
    args = parser.parse_args()
    if args.quick:
        args.budget_s, args.sb3_budget_s, args.snapshot_s, args.episodes = 12.0, 12.0, 4.0, 5
    sb3_budget = args.sb3_budget_s or 3.0 * args.budget_s

    def ours(policy):
        return lambda obs: policy(torch.as_tensor(obs)).detach().numpy()

    results, rates = {}, {}
    for name, train, act_of in (
            ('async', lambda: run_runner('async', args.workers, args.budget_s,
                                         args.snapshot_s, args.seed), ours),
            ('sync', lambda: run_runner('sync', args.workers, args.budget_s,
                                        args.snapshot_s, args.seed), ours),
            ('sb3', lambda: run_sb3(sb3_budget, args.snapshot_s, args.seed), lambda p: p)):
        snapshots, rates[name] = train()
        results[name] = time_to(snapshots, args.threshold, args.episodes, act_of)
        seconds, curve = results[name]  # as it comes: a later setting may fail
        print(f'{name}: {"not reached" if seconds is None else f"{seconds:.0f} s"}  '
              + ', '.join(f'{t:.0f}s:{r:.2f}' for t, r in curve), flush=True)

    print(f'\nTime to {100 * args.threshold:.0f} % success (deterministic policy, '
          f'{args.episodes} episodes per snapshot), budget {args.budget_s:.0f} s for async and '
          f'sync ({args.workers or "default"} workers), {sb3_budget:.0f} s for SB3 SAC, '
          f'seed {args.seed}')
    print(f'{"":<6} {"to target":>12} {"updates/s":>10} {"env steps/s":>12}   curve')
    for name, (seconds, curve) in results.items():
        shown = ', '.join(f'{t:.0f}s:{r:.2f}' for t, r in curve)
        print(f'{name:<6} {"not reached" if seconds is None else f"{seconds:.0f} s":>12}'
              f' {rates[name]["updates_per_s"]:10.1f} {rates[name]["env_steps_per_s"]:12.1f}'
              f'   {shown}')
    a, s = results['async'][0], results['sb3'][0]
    print(json.dumps({'async_s': a, 'sync_s': results['sync'][0], 'sb3_s': s,
                      'speedup_vs_sb3': round(s / a, 2) if a and s else None,
                      'speedup_vs_sb3_at_least': round((s or sb3_budget) / a, 2) if a else None,
                      'updates_per_s': {k: round(v['updates_per_s'], 1)
                                        for k, v in rates.items()},
                      'budget_s': args.budget_s, 'sb3_budget_s': sb3_budget,
                      'seed': args.seed}))


if __name__ == '__main__':
    main()
