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
Measure SAC learner throughput: updates per second at several batch sizes, shipped settings.

The learner is the one ``config/train.yaml`` ships (its ``learner`` section: network sizes,
layer-norm and dropout critics, prioritized replay, hindsight relabeling), on the reach task's
shapes (observation 21, action 6). Column ``update`` times ``SAC.update()`` on a synthetic
batch already on the device (the optimizer steps alone). Column ``learner step`` times
``Learner.train_step()``, what the training loop calls: sampling from a filled prioritized
replay buffer (real and relabeled transitions), normalization, the move to the device, the
update, the priorities written back and the training doctor's checks.

On CUDA both columns take the shipped update, replayed as one CUDA graph per batch size
(``sac.cuda_graph``); ``--cuda-graph off`` measures the eager update beside it.

The last line printed is one JSON object, ``{"updates_per_s_b256": ..., ...}``.

On a loaded machine give ``--threads``: torch's OpenMP threads busy-wait for each other, and
with one core taken by another process two threads ran 30 to 70 times slower than one.

Usage::

    python bench/learner_throughput.py --quick            # < 1 minute
    python bench/learner_throughput.py --device cuda                 # shipped: CUDA graphs
    python bench/learner_throughput.py --device cuda --cuda-graph off  # eager kernels
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Callable

from async_rl_ros.core.config import EnvWorkerConfig, LearnerConfig, load_node_config
from async_rl_ros.core.learning import sac as sac_lib
from async_rl_ros.core.learning.learner import Learner
from async_rl_ros.envs.tasks import resolve_task
from async_rl_ros.local.cli import default_config_path

import numpy as np

import torch

OBS_DIM = 21
ACT_DIM = 6
EPISODE = 100  # steps per episode (4 s at 25 Hz), for the relabeling


def shipped(device: torch.device, compile_mode: str, cuda_graph: bool,
            batch: int) -> LearnerConfig:
    """Return the shipped ``learner`` section with a device, its CUDA update and a batch size."""
    return load_node_config(default_config_path(), 'learner', LearnerConfig, {
        'sac.device': device.type, 'sac.compile': compile_mode, 'sac.cuda_graph': cuda_graph,
        'batch.initial_batch': batch,
        'checkpoint.interval_steps': 0, 'checkpoint.directory': '/tmp/async_rl_bench_lt'})


def synthetic_batch(size: int, device: torch.device, seed: int = 0) -> dict[str, torch.Tensor]:
    """
    Return a random batch of reach-task shapes on ``device``.

    :param size: batch size.
    :param device: where the tensors live.
    :param seed: seed of the generator.
    :returns: ``obs``, ``action``, ``reward``, ``next_obs`` and ``terminated`` tensors.
    """
    gen = torch.Generator().manual_seed(seed)
    batch = {'obs': torch.randn(size, OBS_DIM, generator=gen),
             'action': torch.rand(size, ACT_DIM, generator=gen) * 2 - 1,
             'reward': -torch.rand(size, generator=gen),
             'next_obs': torch.randn(size, OBS_DIM, generator=gen),
             'terminated': (torch.rand(size, generator=gen) < 0.01).float()}
    return {k: v.to(device) for k, v in batch.items()}


def rate(step: Callable[[], None], seconds: float, warmup: int) -> float:
    """
    Time a callable.

    :param step: one learner iteration; it must synchronize with the device itself (SAC's
        ``update()`` does when it reads its metrics).
    :param seconds: measuring time; at least 5 iterations are timed.
    :param warmup: untimed iterations first (allocations, compilation, CUDA graph capture).
    :returns: iterations per second.
    """
    for _ in range(warmup):
        step()
    count = 0
    start = time.perf_counter()
    while count < 5 or time.perf_counter() - start < seconds:
        step()
        count += 1
    return count / (time.perf_counter() - start)


def make_sac(cfg: LearnerConfig, guard: bool) -> sac_lib.SAC:
    """
    Build the shipped SAC of the reach task.

    :param cfg: the learner section.
    :param guard: keep the default finite-step guard (one extra sync per optimizer step).
    :returns: a fresh SAC.
    """
    sac = sac_lib.SAC(OBS_DIM, ACT_DIM, cfg.sac)
    if not guard:
        sac.guard = None
    return sac


def make_learner(cfg: LearnerConfig, transitions: int) -> Learner:
    """
    Return the shipped learner with ``transitions`` random reach-task transitions ingested.

    Whole episodes go in, so the replay also holds their hindsight-relabeled copies.

    :param cfg: the learner section.
    :param transitions: env steps ingested (a multiple of the episode length).
    """
    _, spec = resolve_task(EnvWorkerConfig())  # the reach task's goal spec
    learner = Learner(cfg, OBS_DIM, ACT_DIM, goal_spec=spec.goal)
    rng = np.random.default_rng(0)
    for episode in range(max(1, transitions // EPISODE)):
        obs = rng.standard_normal((EPISODE + 1, OBS_DIM), dtype=np.float32)
        learner.ingest({
            'obs': obs[:-1], 'next_obs': obs[1:],
            'action': rng.uniform(-1, 1, (EPISODE, ACT_DIM)).astype(np.float32),
            'reward': -rng.random(EPISODE, dtype=np.float32),
            'terminated': np.zeros(EPISODE, dtype=bool),
            'truncated': np.arange(EPISODE) == EPISODE - 1,
            'policy_version': np.zeros(EPISODE, dtype=np.int64),
            'worker_id': np.zeros(EPISODE, dtype=np.int32)})
    return learner


def main(argv: list[str] | None = None) -> dict[str, float | None]:
    """
    Run the benchmark and print a table, then the JSON summary as the last line.

    :param argv: command-line arguments (``sys.argv[1:]`` when omitted).
    :returns: the JSON summary.
    """
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--quick', action='store_true', help='short run (< 1 minute)')
    parser.add_argument('--device', default='auto', choices=('auto', 'cpu', 'cuda'))
    parser.add_argument('--compile', default='off', choices=('off', 'auto', 'on'),
                        help='sac.compile (CUDA only; turns --cuda-graph off)')
    parser.add_argument('--cuda-graph', default='on', choices=('on', 'off'),
                        help='sac.cuda_graph (CUDA only; shipped: on)')
    parser.add_argument('--batch-sizes', type=int, nargs='+', default=[256, 512, 1024])
    parser.add_argument('--seconds', type=float, default=None,
                        help='timed seconds per cell (default 2.5 with --quick, else 10)')
    parser.add_argument('--threads', type=int, default=0,
                        help='torch CPU threads (0: leave torch default)')
    parser.add_argument('--no-guard', action='store_true',
                        help='drop the finite-step guard (saves a sync per optimizer step)')
    parser.add_argument('--no-learner', action='store_true',
                        help='skip the learner-step column')
    args = parser.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = sac_lib.resolve_device(args.device)
    seconds = args.seconds if args.seconds is not None else (2.5 if args.quick else 10.0)
    warmup = 30 if device.type == 'cuda' else 3
    transitions = 10_000 if args.quick else 100_000

    graph = args.cuda_graph == 'on' and args.compile == 'off'
    graphed = graph and device.type == 'cuda'  # what the learner does with that setting
    hidden = shipped(device, args.compile, graph, 256).sac.hidden_sizes
    print(f'device={device} threads={torch.get_num_threads()} compile={args.compile} '
          f'cuda_graph={graphed} '
          f'guard={not args.no_guard} hidden={hidden} seconds/cell={seconds:g} '
          f'replay={transitions} env steps (+ relabeled copies)')
    print(f'{"batch":>6} | {"update/s":>10} | {"samples/s":>10} | {"learner step/s":>15}')
    summary: dict[str, float | None] = {}
    for size in args.batch_sizes:
        cfg = shipped(device, args.compile, graph, size)
        sac = make_sac(cfg, not args.no_guard)
        batch = synthetic_batch(size, device)
        ups = rate(lambda: sac.update(batch), seconds, warmup)
        summary[f'updates_per_s_b{size}'] = round(ups, 2)
        steps = None
        if not args.no_learner:
            learner = make_learner(cfg, transitions)
            if args.no_guard:
                learner.sac.guard = None
            steps = rate(learner.train_step, seconds, warmup)
            summary[f'learner_steps_per_s_b{size}'] = round(steps, 2)
        cell = f'{steps:15.1f}' if steps is not None else f'{"-":>15}'
        print(f'{size:>6} | {ups:10.1f} | {ups * size:10.0f} | {cell}')
    summary['device'] = str(device)
    summary['cuda_graph'] = graphed
    summary['hidden_sizes'] = list(hidden)
    print(json.dumps(summary))
    return summary


if __name__ == '__main__':
    main()
