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
Pipeline throughput on one machine: raw env rate, sync pipeline, async pipeline.

* raw: W processes stepping the reach env with random actions, no learner;
* sync: the local runner in lockstep (every worker sends a batch, then waits while the
  learner does one update per transition and publishes weights);
* async: the same components, workers never waiting. The rate limit that keeps training at
  the learner's update-to-data ratio is off here (``rate_limit_slack: 0``): this measures
  what the pipeline can carry, as in the design write-up's comparison.

Both pipelines train the shipped configuration's SAC (batch 256 here, to match the
single-process comparisons) and are measured over the same window after learning starts.

Usage: ``python bench/throughput.py [--quick] [--workers W]``; the last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import time

import numpy as np


def _raw_env(args: tuple[int, float]) -> float:
    seed, seconds = args
    from async_rl_ros.envs.reach_env import make_reach_env

    env = make_reach_env()
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        action = rng.uniform(-1, 1, env.action_space.shape).astype(np.float32)
        _, _, terminated, truncated, _ = env.step(action)
        steps += 1
        if terminated or truncated:
            env.reset()
    env.close()
    return steps / (time.perf_counter() - start)


def pipeline(mode: str, workers: int, seconds: float) -> dict[str, float]:
    """Run the local runner for ``seconds`` after learning starts; return its rates."""
    from async_rl_ros.core.config import EnvWorkerConfig, LearnerConfig, LocalRunnerConfig
    from async_rl_ros.core.learning.metrics import MetricsLogger
    from async_rl_ros.local.train import LocalRun

    cfg = LearnerConfig().replace(**{'batch.initial_batch': 256, 'learning_starts': 1000,
                                     'warmup_steps': 1000, 'total_env_steps': 10**9,
                                     'rate_limit_slack': 0,
                                     'checkpoint.directory': '/tmp/async_rl_bench_tp'})
    run = LocalRun(EnvWorkerConfig(), cfg,
                   LocalRunnerConfig().replace(mode=mode, num_workers=workers),
                   logger=MetricsLogger(), evaluate=False)
    learner = run.learner
    window: dict[str, float] = {}
    lags: list[float] = []

    def stop() -> bool:
        now = time.perf_counter()
        if 'start' not in window and learner.updates > 0:
            window.update(start=now, steps=learner.env_steps, updates=learner.updates)
        elif 'start' in window and now - window.get('sampled', 0.0) > 0.5:
            window['sampled'] = now
            lags.append(run.loop.lag_percentiles().get('charts/transition_lag_p50', 0.0))
        return 'start' in window and now - window['start'] > seconds

    try:
        run.run(should_stop=stop)
    finally:
        run.close()
    elapsed = time.perf_counter() - window['start']
    return {'samples_per_s': (learner.env_steps - window['steps']) / elapsed,
            'updates_per_s': (learner.updates - window['updates']) / elapsed,
            'policy_lag': float(np.mean(lags)) if lags else 0.0}


def main() -> None:
    """Measure the three settings and print the table and the JSON summary."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--quick', action='store_true', help='short run (< 1 min)')
    parser.add_argument('--workers', type=int, default=2)
    parser.add_argument('--seconds', type=float, default=None, help='window per setting')
    args = parser.parse_args()
    seconds = args.seconds or (8.0 if args.quick else 30.0)
    with mp.get_context('spawn').Pool(args.workers) as pool:
        raw = sum(pool.map(_raw_env, [(s, seconds) for s in range(args.workers)]))
    sync = pipeline('sync', args.workers, seconds)
    asyn = pipeline('async', args.workers, seconds)
    print(f'\nLocal pipeline throughput, {args.workers} workers, {seconds:.0f} s windows '
          '(after learning starts)')
    print(f'{"setting":<8}{"samples/s":>11}{"updates/s":>11}{"policy lag":>12}')
    print('-' * 42)
    print(f'{"raw env":<8}{raw:>11.0f}{"-":>11}{"-":>12}')
    for name, r in (('sync', sync), ('async', asyn)):
        print(f'{name:<8}{r["samples_per_s"]:>11.0f}{r["updates_per_s"]:>11.1f}'
              f'{r["policy_lag"]:>12.2f}')
    ratio = asyn['samples_per_s'] / max(sync['samples_per_s'], 1e-9)
    print(f'async / sync samples/s: {ratio:.2f}; async / raw: '
          f'{asyn["samples_per_s"] / raw:.2f}')
    print(json.dumps({'raw_samples_per_s': round(raw, 1),
                      'sync_samples_per_s': round(sync['samples_per_s'], 1),
                      'async_samples_per_s': round(asyn['samples_per_s'], 1),
                      'async_over_sync': round(ratio, 2),
                      'async_updates_per_s': round(asyn['updates_per_s'], 1)}))


if __name__ == '__main__':
    main()
