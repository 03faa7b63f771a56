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
Wall-clock time to a success rate on one task: async, sync and a baseline (SB3 family).

``--task`` picks the task as ``async-rl-train --task`` does (``reach``, the default, or
``gym:ID`` such as ``gym:PandaPush-v3``); ``--target`` the success rate (default 0.95). Each
setting trains alone on the machine (one after the other): async and sync as
``async-rl-train`` runs them (shipped defaults, their evaluator process included) for at most
``--budget-s``, the baseline (torch threads on every core) for at most ``--sb3-budget-s``
(default three times as long, so that a "3x faster" can be seen). The baseline is
``--baseline``: ``sac`` (SB3 SAC with its defaults, no HER: the default on ``reach``) or
``sac_her`` / ``tqc_her`` (HER and rl-baselines3-zoo's tuned settings, as
``bench/_baselines.py`` builds them for both benches: the default ``tqc_her`` on ``gym:`` tasks).
Evaluation must not stop the clock it measures, so training only snapshots the policy every
``--snapshot-s`` seconds (a copy of the policy the run's evaluator would score -- the averaged
actor, with the shipped ``sac.policy_average_tau`` and ``sac.policy_average_fraction`` --
milliseconds); after training, every snapshot is evaluated on the same episodes with the
deterministic policy, and the time to success is the wall-clock time of the first snapshot
reaching the target. Each setting's updates/s and env steps/s over its whole budget are
printed beside it.

Each setting's result (its curve, the time to the target and its rates) is appended to
``--results`` as it ends; a later invocation with the same task, seed, target, budget,
snapshots, evaluation and shipped defaults reuses it instead of training again (``--fresh``:
train everything again), so a stopped run loses only the setting in progress.

Usage: ``python bench/time_to_success.py [--quick] [--task NAME] [--target F] [--workers W]
[--budget-s S] [--sb3-budget-s S] [--baseline sac|sac_her|tqc_her] [--seed N]
[--results PATH] [--fresh] [--set KEY=VALUE ...]``; ``--set`` changes one setting of the
shipped configuration for async and sync alike, as ``async-rl-train --set`` does (not the ones
the bench fixes itself: the modes, the seeds, the workers, the first batch; an ``env_worker``
setting changes the baseline's env too), and the JSON lists them under ``settings``. The
last line is a JSON summary (``null`` where a setting did not reach the target in its budget;
``speedup_vs_sb3_at_least`` then bounds the speed-up by the baseline's budget).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import time

from _baselines import baseline_env, make_baseline  # beside this script
import _overrides
import _results
from _scores import NAMES  # the learners' names, as the sample-efficiency bench prints them
import numpy as np

EVAL_SEED = 2_000_000
#: What the bench sets itself: a ``--set`` of these is refused, not silently overridden.
_FIXED = {'env_worker': ('seed', 'task.name'),
          'learner': ('seed', 'total_env_steps', 'batch.initial_batch', 'checkpoint.directory'),
          'local_runner': ('mode', 'num_workers')}


def _eval_env(task: str, seed: int = 0, baseline: str | None = None, nodes: dict | None = None):
    """Return the env a setting is evaluated on: the task's flat env, or the baseline's."""
    from async_rl_ros.envs.factory import evaluation_env, outside_training

    env_cfg = _configs(10**9, seed, task, nodes)[0]
    if baseline is not None and baseline != 'sac':
        return baseline_env(task, outside_training(env_cfg))
    return evaluation_env(env_cfg)[0]


def _success(act, episodes: int, env) -> float:
    from async_rl_ros.core.learning.evaluation import run_episodes

    return run_episodes(env, act, episodes, seed=EVAL_SEED).success_rate


def _configs(budget_steps: int, seed: int, task: str = 'reach', nodes: dict | None = None):
    """Return the env, learner and runner sections: shipped, ``nodes`` (``--set``), the bench's."""
    from async_rl_ros.envs.tasks import load_sections
    from async_rl_ros.local.cli import default_config_path
    nodes = nodes or {}
    loaded = load_sections(default_config_path(), {
        'env_worker': {**nodes.get('env_worker', {}), 'seed': seed, 'task.name': task},
        'learner': {**nodes.get('learner', {}), 'seed': seed, 'total_env_steps': budget_steps,
                    'batch.initial_batch': 256,
                    'checkpoint.directory': '/tmp/async_rl_bench_tts'},
        'local_runner': nodes.get('local_runner', {})},
        ('env_worker', 'learner', 'local_runner'))  # over the task's own defaults
    return loaded['env_worker'], loaded['learner'], loaded['local_runner']


def run_runner(mode: str, workers: int, budget_s: float, snapshot_s: float, seed: int = 0,
               task: str = 'reach', nodes: dict | None = None
               ) -> tuple[list[tuple[float, object]], dict[str, float]]:
    """
    Train as ``async-rl-train`` does (shipped defaults, and ``nodes``: the ``--set`` ones).

    :returns: timed policy snapshots, and the run's updates/s and env steps/s.
    """
    from async_rl_ros.core.learning.metrics import MetricsLogger
    from async_rl_ros.local.train import LocalRun

    env_cfg, cfg, rcfg = _configs(10**9, seed, task, nodes)
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


def run_sb3(budget_s: float, snapshot_s: float, seed: int = 0, task: str = 'reach',
            baseline: str = 'sac', nodes: dict | None = None
            ) -> tuple[list[tuple[float, object]], dict[str, float]]:
    """
    Train the baseline ``baseline`` (``sac``: SB3 SAC, its defaults) on the same task.

    The env is the one our runs step (``nodes``: the ``--set`` settings, of which the
    baseline takes the env's, bringing its own learner).

    :returns: timed policy snapshots, and the run's updates/s and env steps/s.
    """
    from stable_baselines3.common.callbacks import BaseCallback
    import torch

    torch.set_num_threads(os.cpu_count() or 1)  # alone on the machine: every core
    model, normalize, eval_env = make_baseline(
        baseline, task, seed, 10**7, _configs(10**9, seed, task, nodes)[0])
    eval_env.close()
    snapshots: list[tuple[float, object]] = []
    start = time.perf_counter()

    class Snapshot(BaseCallback):

        def _on_step(self) -> bool:
            elapsed = time.perf_counter() - start
            if elapsed - (snapshots[-1][0] if snapshots else 0) > snapshot_s:
                stats = copy.deepcopy(normalize.obs_rms) if normalize is not None else None
                snapshots.append((elapsed, (copy.deepcopy(model.policy.actor.state_dict()),
                                            stats)))
            return elapsed < budget_s

    model.learn(10**9, callback=Snapshot())
    elapsed = time.perf_counter() - start
    rates = {'updates_per_s': model._n_updates / elapsed,
             'env_steps_per_s': model.num_timesteps / elapsed}

    def policy(snapshot):
        state, stats = snapshot
        clone = copy.deepcopy(model.policy)
        clone.actor.load_state_dict(state)
        if stats is None:
            return lambda obs: clone.predict(obs, deterministic=True)[0]
        eps, clip = normalize.epsilon, normalize.clip_obs

        def act(obs):
            obs = {k: np.clip((v - stats[k].mean) / np.sqrt(stats[k].var + eps), -clip, clip)
                   if k in stats else v for k, v in obs.items()}
            return clone.predict(obs, deterministic=True)[0]
        return act

    model.get_env().close()
    return [(t, policy(s)) for t, s in snapshots], rates


def time_to(snapshots, threshold: float, episodes: int, act_of, make_env=None
            ) -> tuple[float | None, list]:
    """
    Evaluate snapshots in time order; return the first time at ``threshold`` and a curve.

    :param make_env: builds the env the snapshots are scored on (default: the reach task's).
    """
    curve = []
    if not snapshots:
        return None, curve
    env = (make_env or _eval_env)()
    try:
        for seconds, policy in snapshots:
            rate = _success(act_of(policy), episodes, env)
            curve.append((seconds, rate))
            if rate >= threshold:
                return seconds, curve
    finally:
        env.close()
    return None, curve


def _key(name: str, args, sb3_budget: float) -> dict:
    """Return what a stored result of setting ``name`` must have been measured under."""
    env_cfg, cfg, rcfg = _configs(10**9, args.seed, args.task, args.nodes)
    ours = name != 'sb3'
    return {'setting': name, 'task': args.task, 'seed': args.seed, 'target': args.target,
            'budget_s': args.budget_s if ours else sb3_budget, 'snapshot_s': args.snapshot_s,
            'episodes': args.episodes, 'eval_seed': EVAL_SEED,
            'workers': args.workers if ours else None,
            'baseline': None if ours else args.baseline,
            # the shipped defaults it trained with (the baseline brings its own learner)
            'settings': _results.settings_digest(env_cfg, cfg if ours else None,
                                                 rcfg if ours else None)}


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
    parser.add_argument('--target', '--threshold', type=float, default=0.95, dest='target',
                        help='success rate to reach (a fraction)')
    parser.add_argument('--task', default='reach',
                        help='task name as async-rl-train --task takes it (reach, gym:ID)')
    parser.add_argument('--baseline', choices=('sac', 'sac_her', 'tqc_her'), default=None,
                        help='the baseline (default: sac on reach, tqc_her on gym: tasks)')
    parser.add_argument('--seed', type=int, default=0, help='env, learner and baseline seed')
    parser.add_argument('--results', default=None,
                        help='JSON-lines file of finished settings, reused by later invocations '
                        '(default: runs/bench/time_to_success_<task>.jsonl; "" for '
                        'none)')
    parser.add_argument('--fresh', action='store_true',
                        help='train every setting again, even those in the results file')
    _overrides.add_argument(parser)
    args = parser.parse_args()
    if args.quick:
        args.budget_s, args.sb3_budget_s, args.snapshot_s, args.episodes = 12.0, 12.0, 4.0, 5
    sb3_budget = args.sb3_budget_s or 3.0 * args.budget_s
    if args.baseline is None:
        args.baseline = 'tqc_her' if args.task.startswith('gym:') else 'sac'
    from async_rl_ros.core.config import ConfigError
    try:  # a bad --task or --set: one line naming it, exit 2, before anything trains
        args.nodes = _overrides.by_node(args.overrides, _FIXED, 'async and sync are the modes '
                                        'it measures, at the first batch of 256 the baseline '
                                        'trains with; --task, --seed, --workers')
        _configs(10**9, args.seed, args.task, args.nodes)
    except ConfigError as exc:
        parser.exit(2, f'time_to_success.py: {exc}\n')
    if args.results is None:
        args.results = _results.default_path('time_to_success', args.task, args.quick)
    stored = [] if args.fresh else _results.load(args.results)

    def ours(policy):
        return lambda obs: policy(torch.as_tensor(obs)).detach().numpy()

    results, rates = {}, {}
    task, seed = args.task, args.seed
    for name, train, act_of, make_env in (
            ('async', lambda: run_runner('async', args.workers, args.budget_s,
                                         args.snapshot_s, seed, task, args.nodes), ours,
             lambda: _eval_env(task, seed, nodes=args.nodes)),
            ('sync', lambda: run_runner('sync', args.workers, args.budget_s,
                                        args.snapshot_s, seed, task, args.nodes), ours,
             lambda: _eval_env(task, seed, nodes=args.nodes)),
            ('sb3', lambda: run_sb3(sb3_budget, args.snapshot_s, seed, task, args.baseline,
                                    args.nodes),
             lambda p: p, lambda: _eval_env(task, seed, args.baseline, args.nodes))):
        key = _key(name, args, sb3_budget)
        found = _results.find(stored, key)
        if found is not None:
            print(f'{name}: read from {args.results}', flush=True)
            results[name] = found['seconds'], [tuple(point) for point in found['curve']]
            rates[name] = found['rates']
        else:
            snapshots, rates[name] = train()
            results[name] = time_to(snapshots, args.target, args.episodes, act_of, make_env)
            _results.save(args.results, key, {'seconds': results[name][0],
                                              'curve': results[name][1], 'rates': rates[name]})
        seconds, curve = results[name]  # as it comes: a later setting may fail
        print(f'{name}: {"not reached" if seconds is None else f"{seconds:.0f} s"}  '
              + ', '.join(f'{t:.0f}s:{r:.2f}' for t, r in curve), flush=True)

    given = _overrides.flat(args.nodes)
    changed = ', '.join(f'{name}={value}' for name, value in given.items())
    print(f'\n{task}: time to {100 * args.target:.0f} % success (deterministic policy, '
          f'{args.episodes} episodes per snapshot), budget {args.budget_s:.0f} s for async and '
          f'sync ({args.workers or "default"} workers; shipped defaults'
          f'{f" and {changed}" if changed else ""}), {sb3_budget:.0f} s for '
          f'{NAMES[args.baseline]} (row sb3), seed {args.seed}')
    print(f'{"":<6} {"to target":>12} {"updates/s":>10} {"env steps/s":>12}   curve')
    for name, (seconds, curve) in results.items():
        shown = ', '.join(f'{t:.0f}s:{r:.2f}' for t, r in curve)
        print(f'{name:<6} {"not reached" if seconds is None else f"{seconds:.0f} s":>12}'
              f' {rates[name]["updates_per_s"]:10.1f} {rates[name]["env_steps_per_s"]:12.1f}'
              f'   {shown}')
    a, y, s = results['async'][0], results['sync'][0], results['sb3'][0]
    print(json.dumps({'task': task, 'target': args.target, 'baseline': NAMES[args.baseline],
                      'async_s': a, 'sync_s': y, 'sb3_s': s,
                      'speedup_vs_sync': round(y / a, 2) if a and y else None,
                      'speedup_vs_sync_at_least': (round((y or args.budget_s) / a, 2) if a
                                                   else None),
                      'speedup_vs_sb3': round(s / a, 2) if a and s else None,
                      'speedup_vs_sb3_at_least': round((s or sb3_budget) / a, 2) if a else None,
                      'updates_per_s': {k: round(v['updates_per_s'], 1)
                                        for k, v in rates.items()},
                      'budget_s': args.budget_s, 'sb3_budget_s': sb3_budget,
                      'seed': args.seed, 'settings': given}))


if __name__ == '__main__':
    main()
