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
number of env steps, with the same seeds; runs go ``--jobs`` at a time, one per core, with one
torch thread each, so they share the machine alike. This learner runs
``single_process_loop`` with the shipped learner defaults and the reach task's goal spec
(hindsight relabeling); SB3 runs with its own defaults (256x256 networks, batch 256, learning
rate 3e-4, automatic temperature, one update per step).

Every ``--eval-every`` env steps the deterministic policy is evaluated on the same 40
episodes (fixed seed; with 20, a policy that succeeds 95 % of the time scores below 90 % at
one mark in 13, so "stays >= 90 %" would judge the evaluation's noise; with 40, one in 21).
For this learner that is the policy its evaluator scores and a run exports: the averaged
actor when ``sac.policy_average_tau > 0`` (its window set by ``sac.policy_average_fraction``),
and then the online actor too, in a row of its own. Reported per run: the success rate at
those marks, the env steps and training seconds (evaluations excluded) to the first mark at
>= 95 %, and whether every later mark stays >= 90 %.

``--sb3-steps`` gives SB3 a shorter budget (its runs are the slow part of the bench); its
steps to 95 % then read "not within that budget".

Usage: ``python bench/sample_efficiency.py [--quick] [--steps N] [--sb3-steps N] [--seeds 0 1 2
3 4]``; the
last line is a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import statistics
import time

EVAL_SEED = 1_000_000
EVAL_EPISODES = 40
REACHED, KEPT = 0.95, 0.90


def _success(env, act) -> float:
    from async_rl_ros.core.learning.evaluation import run_episodes
    return run_episodes(env, act, EVAL_EPISODES, seed=EVAL_SEED).success_rate


def _configs(seed: int, steps: int):
    from async_rl_ros.core.config import EnvWorkerConfig, LearnerConfig, load_node_config
    from async_rl_ros.local.cli import default_config_path
    path = default_config_path()
    env_cfg = load_node_config(path, 'env_worker', EnvWorkerConfig)
    overrides = {'seed': seed, 'total_env_steps': steps, 'checkpoint.interval_steps': 0,
                 'checkpoint.directory': f'/tmp/async_rl_bench_ckpt_{seed}'}
    return env_cfg, load_node_config(path, 'learner', LearnerConfig, overrides)


class _Clock:
    """Training seconds, evaluations excluded."""

    def __init__(self):
        self.start = time.perf_counter()
        self.paused = 0.0

    def evaluate(self, fn):
        t = time.perf_counter()
        value = fn()
        self.paused += time.perf_counter() - t
        return value

    def seconds(self) -> float:
        return time.perf_counter() - self.start - self.paused


def run_ours(seed: int, steps: int, marks: list[int]) -> dict:
    """Train this project's learner (shipped defaults, hindsight relabeling)."""
    import torch

    from async_rl_ros.core.learning.learner import Learner
    from async_rl_ros.core.learning.single_process import single_process_loop
    from async_rl_ros.envs.reach_env import UR5ReachEnv
    from async_rl_ros.envs.reach_task import reach_goal_spec

    torch.set_num_threads(1)
    env_cfg, cfg = _configs(seed, steps)
    env, eval_env = UR5ReachEnv(env_cfg), UR5ReachEnv(env_cfg)
    learner = Learner(cfg, env.observation_space.shape[0], env.action_space.shape[0],
                      goal_spec=reach_goal_spec(env_cfg.task))
    curve, online, seconds, clock = {}, {}, {}, _Clock()

    def scripted(policy):
        return lambda obs: policy(torch.as_tensor(obs, dtype=torch.float32)).detach().numpy()

    loop = single_process_loop(learner, env)
    loop.maybe_publish()
    for mark in marks:
        while learner.env_steps < mark:
            loop.step()
        seconds[mark] = clock.seconds()
        # What the evaluator scores and the run exports (the averaged actor when averaging is
        # on); the online actor too then, to show what the averaging changes.
        evaluated = scripted(learner.export_policy(evaluated=True))
        curve[mark] = clock.evaluate(lambda: _success(eval_env, evaluated))
        if learner.sac.actor_average is not None:
            current = scripted(learner.export_policy())
            online[mark] = clock.evaluate(lambda: _success(eval_env, current))
    return {'impl': 'async_rl_ros', 'seed': seed, 'curve': curve, 'online_curve': online,
            'seconds': seconds,
            'steps_per_s': steps / max(clock.seconds(), 1e-9),
            'updates_per_s': learner.updates / max(clock.seconds(), 1e-9)}


def run_sb3(seed: int, steps: int, marks: list[int]) -> dict:
    """Train Stable-Baselines3 SAC with its defaults on the same env."""
    from stable_baselines3 import SAC
    import torch

    from async_rl_ros.envs.reach_env import UR5ReachEnv

    torch.set_num_threads(1)
    env_cfg, _ = _configs(seed, steps)
    env, eval_env = UR5ReachEnv(env_cfg), UR5ReachEnv(env_cfg)
    model = SAC('MlpPolicy', env, seed=seed, verbose=0, device='cpu')

    def act(obs):
        return model.predict(obs, deterministic=True)[0]

    curve, seconds, done, clock = {}, {}, 0, _Clock()
    for mark in marks:
        model.learn(mark - done, reset_num_timesteps=False)
        done = mark
        seconds[mark] = clock.seconds()
        curve[mark] = clock.evaluate(lambda: _success(eval_env, act))
    return {'impl': 'sb3', 'seed': seed, 'curve': curve, 'seconds': seconds,
            'steps_per_s': steps / max(clock.seconds(), 1e-9),
            'updates_per_s': model.num_timesteps / max(clock.seconds(), 1e-9)}  # 1 per step


def _job(args: tuple) -> dict:
    impl, *rest = args
    result = (run_ours if impl == 'ours' else run_sb3)(*rest)
    first = _first_reaching(result['curve'])
    result['steps_to_95'] = first
    result['seconds_to_95'] = result['seconds'][first] if first is not None else None
    result['stays_90'] = _stays(result['curve'], first)
    online = result.get('online_curve')
    if online:
        first_online = _first_reaching(online)
        result['online_steps_to_95'] = first_online
        result['online_stays_90'] = _stays(online, first_online)
    return result


def _first_reaching(curve: dict) -> int | None:
    """Return the first mark at >= 95 %, or ``None``."""
    return next((m for m in sorted(curve) if curve[m] >= REACHED), None)


def _stays(curve: dict, first: int | None) -> bool:
    """Tell whether every mark from the first at >= 95 % on stays >= 90 %."""
    return first is not None and all(curve[m] >= KEPT for m in curve if m >= first)


def _median(values) -> float | None:
    """Median counting a run that never got there as infinite; ``None`` if that is the median."""
    med = statistics.median([math.inf if v is None else v for v in values])
    return None if math.isinf(med) else med


def main() -> None:
    """Run every (implementation, seed) pair; print the tables and the JSON summary."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--quick', action='store_true',
                        help='smoke run: 2,000 steps, one seed, marks every 1,000')
    parser.add_argument('--steps', type=int, default=50_000, help='env steps per run')
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2, 3, 4])
    parser.add_argument('--sb3-steps', type=int, default=None,
                        help='env steps per SB3 run (default: --steps)')
    parser.add_argument('--eval-every', type=int, default=2500, help='env steps between marks')
    parser.add_argument('--jobs', type=int, default=2, help='runs in parallel')
    parser.add_argument('--only', choices=('ours', 'sb3'), default=None,
                        help='run one implementation only')
    args = parser.parse_args()
    if args.quick:
        args.steps, args.sb3_steps, args.seeds, args.eval_every = 2000, None, [0], 1000
    budgets = {'ours': args.steps, 'sb3': args.sb3_steps or args.steps}
    marks = list(range(args.eval_every, args.steps + 1, args.eval_every))
    impls = [args.only] if args.only else ['ours', 'sb3']
    # Longest runs first, so that the pool's last round is not one long run on one core.
    jobs = sorted(((impl, seed, budgets[impl], [m for m in marks if m <= budgets[impl]])
                   for impl in impls for seed in args.seeds), key=lambda job: -job[2])
    results = []
    with mp.get_context('spawn').Pool(args.jobs) as pool:
        for r in pool.imap_unordered(_job, jobs, chunksize=1):  # a line per finished run
            results.append(r)
            print(f'[{len(results)}/{len(jobs)}] {r["impl"]} seed {r["seed"]}: to 95 % '
                  f'{r["steps_to_95"]}, stays >= 90 %: {r["stays_90"]}, curve '
                  + ' '.join(f'{r["curve"][m]:.2f}' for m in sorted(r['curve'])), flush=True)
    results.sort(key=lambda r: (r['impl'] != 'async_rl_ros', r['seed']))

    print(f'\nUR5 reach, single-process SAC, {budgets} env steps, seeds {args.seeds}')
    print(f'deterministic success rate ({EVAL_EPISODES} episodes) at env steps; first step at '
          f'>= {REACHED:.0%}, its training seconds, and whether later marks stay >= {KEPT:.0%}')
    shown = [m for m in marks if m % 5000 == 0] or marks
    header = (f'{"learner":<14}{"seed":>5}' + ''.join(f'{m:>7}' for m in shown)
              + f'{"to 95%":>9}{"s":>7}{"stays":>7}{"steps/s":>8}{"upd/s":>7}')
    print(header)
    print('-' * len(header))
    for r in results:
        print(f'{r["impl"]:<14}{r["seed"]:>5}'
              + ''.join(f'{r["curve"][m]:>7.2f}' if m in r['curve'] else f'{"-":>7}'
                        for m in shown)
              + f'{str(r["steps_to_95"]):>9}'
              + (f'{r["seconds_to_95"]:>7.0f}' if r['seconds_to_95'] is not None else f'{"-":>7}')
              + f'{"yes" if r["stays_90"] else "no":>7}{r["steps_per_s"]:>8.1f}'
              + f'{r["updates_per_s"]:>7.0f}')
        if r.get('online_curve'):
            print(f'{"  online actor":<19}'
                  + ''.join(f'{r["online_curve"][m]:>7.2f}' if m in r['online_curve']
                            else f'{"-":>7}' for m in shown)
                  + f'{str(r["online_steps_to_95"]):>9}{"-":>7}'
                  + f'{"yes" if r["online_stays_90"] else "no":>7}')
    ours = [r for r in results if r['impl'] == 'async_rl_ros']
    sb3 = [r for r in results if r['impl'] == 'sb3']
    at_20k = [r['curve'][20_000] for r in ours if 20_000 in r['curve']]
    summary = {
        'env_steps': args.steps,
        'sb3_env_steps': budgets['sb3'],
        'eval_episodes': EVAL_EPISODES,
        'env_steps_to_95_median': _median(r['steps_to_95'] for r in ours) if ours else None,
        'seeds_reaching_95': sum(r['steps_to_95'] is not None for r in ours),
        'seeds_staying_90': sum(r['stays_90'] for r in ours),
        'online_actor_seeds_staying_90': (sum(r['online_stays_90'] for r in ours)
                                          if ours and ours[0].get('online_curve') else None),
        'seconds_to_95_median': _median(r['seconds_to_95'] for r in ours) if ours else None,
        'sb3_env_steps_to_95_median': _median(r['steps_to_95'] for r in sb3) if sb3 else None,
        'sb3_seconds_to_95_median': _median(r['seconds_to_95'] for r in sb3) if sb3 else None,
        'success_rate_at_20k_min': min(at_20k) if at_20k else None,
    }
    print(json.dumps(summary))


if __name__ == '__main__':
    main()
