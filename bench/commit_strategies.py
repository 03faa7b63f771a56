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
Delayed update: learner stall per optimizer step and bytes/s for commit_every 1 vs 8.

The learner of ``--task`` (its shipped settings and network shapes; reach by default) trains
on a replay buffer of random transitions. After every
``commit_every`` optimizer steps it commits its policy state through the production weight
path, ``LocalWeightPath.publish`` (the float32 change per shard, queued to the shard
processes, which encode and serve the int8 packets on their shared-memory boards).
The stall is the time the learner-side commit path adds per optimizer step;
the loop with no commits runs in the same process for comparison, and the rounds alternate
so machine noise hits every setting alike.

Usage: ``python bench/commit_strategies.py [--quick] [--task NAME]``; the last line is a JSON
summary.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np


def _learner(seed: int, task: str):
    """Return the shipped learner of ``task`` with 5,000 random transitions of its shape."""
    import torch

    from async_rl_ros.core.learning.learner import Learner
    from async_rl_ros.envs.tasks import load_sections, resolve_task
    from async_rl_ros.local.cli import default_config_path

    torch.set_num_threads(1)
    sections = load_sections(default_config_path(), {
        'env_worker': {'task.name': task},
        'learner': {'seed': seed, 'checkpoint.directory': '/tmp/async_rl_bench_commit'}},
        ('env_worker', 'learner'))
    _, spec = resolve_task(sections['env_worker'])
    obs_dim, act_dim = spec.obs_dim, spec.act_dim
    learner = Learner(sections['learner'], obs_dim, act_dim)
    rng = np.random.default_rng(seed)
    n = 5000
    obs = rng.normal(size=(n, obs_dim)).astype(np.float32)
    learner.ingest({'obs': obs, 'action': rng.uniform(-1, 1, (n, act_dim)).astype(np.float32),
                    'reward': rng.normal(size=n).astype(np.float32),
                    'next_obs': obs + 0.01, 'terminated': np.zeros(n, bool),
                    'truncated': np.zeros(n, bool), 'policy_version': np.zeros(n, np.int64),
                    'worker_id': np.zeros(n, np.int32)})
    return learner


def measure(commit_every: int | None, steps: int, seed: int = 0, task: str = 'reach'
            ) -> dict[str, float]:
    """Return seconds per optimizer step and bytes published for one setting."""
    from async_rl_ros.core.config import CodecConfig, ParameterServerConfig
    from async_rl_ros.local.weight_path import LocalWeightPath

    learner = _learner(seed, task)
    path = LocalWeightPath(ParameterServerConfig(), CodecConfig(), learner.policy_state())
    stall = 0.0
    start = time.perf_counter()
    for step in range(1, steps + 1):
        learner.train_step()
        if commit_every and step % commit_every == 0:
            begin = time.perf_counter()
            state = learner.policy_state()
            version = path.publish(state) if state is not None else None
            if version is not None:
                learner.policy_version = version
            stall += time.perf_counter() - begin
    elapsed = time.perf_counter() - start
    path.close()
    return {'step_s': elapsed / steps, 'stall_s': stall / steps,
            'bytes_per_s': path.bytes_committed / elapsed}


def main() -> None:
    """Alternate the settings for a few rounds, print the table and the JSON summary."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--quick', action='store_true', help='short run (< 1 min)')
    parser.add_argument('--task', default='reach',
                        help='task whose shipped learner and network shapes train (reach, push)')
    args = parser.parse_args()
    steps, rounds = (120, 2) if args.quick else (400, 3)
    settings = {'none': None, 'commit_every=1': 1, 'commit_every=8': 8}
    results: dict[str, list[dict[str, float]]] = {k: [] for k in settings}
    for _ in range(rounds):
        for name, every in settings.items():
            results[name].append(measure(every, steps, task=args.task))
    med = {name: {key: statistics.median(r[key] for r in runs) for key in runs[0]}
           for name, runs in results.items()}
    print(f'\nDelayed commits, {args.task}: the shipped learner, {steps} optimizer steps x '
          f'{rounds} alternating rounds (medians)')
    print(f'{"setting":<16}{"ms/step":>9}{"stall ms/step":>15}{"MB/s committed":>16}')
    print('-' * 56)
    for name, r in med.items():
        print(f'{name:<16}{1e3 * r["step_s"]:>9.2f}{1e3 * r["stall_s"]:>15.3f}'
              f'{r["bytes_per_s"] / 1e6:>16.3f}')
    print('stall = policy_state + LocalWeightPath.publish (diff, pack, queue), per optimizer step')
    print(json.dumps({'task': args.task,
                      'step_ms_none': round(1e3 * med['none']['step_s'], 3),
                      'stall_ms_commit1': round(1e3 * med['commit_every=1']['stall_s'], 4),
                      'stall_ms_commit8': round(1e3 * med['commit_every=8']['stall_s'], 4)}))


if __name__ == '__main__':
    main()
