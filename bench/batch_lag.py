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
Policy lag that batching adds: full batches only against the shipped ``max_batch_lag``.

The lag of a transition is the learner's policy version when the transition arrives minus
the version that chose its action. A worker that fills its 64-transition batch slowly while
the learner publishes fast (a GPU learner, many workers, a high update-to-data ratio) delivers
data many versions old, and the training doctor reads that as staleness. Each setting runs
the local runner (async, worker processes, the shipped configuration of reach) for a window
after learning starts and records every batch the learner receives:

* ``commit_every`` 8 (shipped) and 1 (a learner publishing 8 times as often: the fast case);
* ``max_batch_lag`` 0 (full batches only) and the shipped value.

Usage: ``python bench/batch_lag.py [--quick] [--seconds S]``; the last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def measure(commit_every: int, max_batch_lag: int, seconds: float) -> dict[str, float]:
    """Run the local runner for ``seconds`` after learning starts; return lag and messages."""
    from async_rl_ros.core.config import EnvWorkerConfig, LearnerConfig, LocalRunnerConfig
    from async_rl_ros.core.config import load_node_config
    from async_rl_ros.core.learning.metrics import MetricsLogger
    from async_rl_ros.local.cli import default_config_path
    from async_rl_ros.local.train import LocalRun

    path = default_config_path()
    env_cfg = load_node_config(path, 'env_worker', EnvWorkerConfig, {})
    cfg = load_node_config(path, 'learner', LearnerConfig, {
        'total_env_steps': 10**9, 'checkpoint.interval_steps': 0,
        'checkpoint.directory': '/tmp/async_rl_bench_batch_lag'})
    runner = load_node_config(path, 'local_runner', LocalRunnerConfig, {
        'mode': 'async', 'max_batch_lag': max_batch_lag,
        'parameter_server.commit_every': commit_every})
    run = LocalRun(env_cfg, cfg, runner, logger=MetricsLogger(), evaluate=False)
    learner, loop = run.learner, run.loop
    window: dict[str, float] = {}
    lags: list[np.ndarray] = []
    ingest = loop.ingest

    def recording(received: list) -> None:
        if 'start' in window:
            for item in received:
                acted = np.asarray(item.batch['policy_version']).reshape(-1)
                lags.append(learner.policy_version - acted[acted >= 0])
        ingest(received)

    loop.ingest = recording

    def stop() -> bool:
        now = time.perf_counter()
        if 'start' not in window and learner.updates > 0:
            window.update(start=now, updates=learner.updates, version=learner.policy_version)
        return 'start' in window and now - window['start'] > seconds

    try:
        run.run(should_stop=stop)
    finally:
        run.close()
    elapsed = time.perf_counter() - window['start']
    acted = np.concatenate(lags) if lags else np.zeros(1)
    return {'lag_mean': float(acted.mean()), 'lag_p99': float(np.percentile(acted, 99)),
            'lag_max': float(acted.max()), 'messages_per_s': len(lags) / elapsed,
            'transitions_per_message': float(acted.size / max(1, len(lags))),
            'versions_per_s': (learner.policy_version - window['version']) / elapsed,
            'updates_per_s': (learner.updates - window['updates']) / elapsed}


def main() -> None:
    """Measure the four settings and print the table and the JSON summary."""
    from async_rl_ros.core.config import LocalRunnerConfig

    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--quick', action='store_true', help='short windows (< 1 min in all)')
    parser.add_argument('--seconds', type=float, default=None, help='window per setting')
    args = parser.parse_args()
    seconds = args.seconds or (5.0 if args.quick else 30.0)
    shipped = LocalRunnerConfig()
    settings = [(commit, lag) for commit in (shipped.parameter_server.commit_every, 1)
                for lag in (0, shipped.max_batch_lag)]
    rows = {setting: measure(*setting, seconds) for setting in settings}
    print(f'\nPolicy lag of the transitions the learner receives, {seconds:.0f} s windows after '
          'learning starts (async, default workers, reach)')
    print(f'{"commit_every":>12}{"max_batch_lag":>14}{"lag mean":>10}{"p99":>7}{"max":>7}'
          f'{"versions/s":>11}{"msgs/s":>8}{"per msg":>8}{"updates/s":>10}')
    print('-' * 87)
    for (commit, lag), r in rows.items():
        print(f'{commit:>12}{lag:>14}{r["lag_mean"]:>10.1f}{r["lag_p99"]:>7.0f}'
              f'{r["lag_max"]:>7.0f}{r["versions_per_s"]:>11.1f}{r["messages_per_s"]:>8.1f}'
              f'{r["transitions_per_message"]:>8.1f}{r["updates_per_s"]:>10.1f}')
    out = {}
    for (commit, lag), r in rows.items():
        name = f'commit{commit}_lag{lag}'
        out[f'{name}_lag_mean'] = round(r['lag_mean'], 2)
        out[f'{name}_lag_max'] = round(r['lag_max'], 1)
        out[f'{name}_messages_per_s'] = round(r['messages_per_s'], 1)
    fast_full, fast_bounded = rows[(1, 0)], rows[(1, shipped.max_batch_lag)]
    ratio = fast_bounded['lag_mean'] / max(fast_full['lag_mean'], 1e-9)
    out['fast_lag_mean_ratio'] = round(ratio, 3)
    print(json.dumps(out))


if __name__ == '__main__':
    main()
