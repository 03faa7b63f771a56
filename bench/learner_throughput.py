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
Measure SAC learner throughput: ``SAC.update()`` calls per second at several batch sizes.

The networks are those of the reach task (observation 21, action 6, hidden 256x2). Column
``update`` times updates on a synthetic batch already on the device (no replay sampling).
Column ``sample+update`` also draws each batch from a filled prioritized
``async_rl_ros.core.learning.replay.ReplayBuffer``, moves it to the device and writes the priorities
back, i.e. the learner's whole inner loop; it is left out when that module cannot be used.

The last line printed is one JSON object, ``{"updates_per_s_b256": ..., ...}``.

On a loaded machine give ``--threads``: torch's OpenMP threads busy-wait for each other, and
with one core taken by another process two threads ran 30 to 70 times slower than one.

Usage::

    python bench/learner_throughput.py --quick            # < 1 minute
    python bench/learner_throughput.py --device cuda --compile auto
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Callable

from async_rl_ros.core.learning import sac as sac_lib

import numpy as np

import torch

OBS_DIM = 21
ACT_DIM = 6
HIDDEN = [256, 256]


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


def make_sac(device: torch.device, compile_mode: str, guard: bool) -> sac_lib.SAC:
    """
    Build the SAC of the reach task.

    :param device: learner device.
    :param compile_mode: ``SACConfig.compile``.
    :param guard: keep the default finite-step guard (one extra sync per optimizer step).
    :returns: a fresh learner.
    """
    cfg = sac_lib.SACConfig.from_flat({'device': device.type, 'compile': compile_mode,
                                       'hidden_sizes': HIDDEN})
    sac = sac_lib.SAC(OBS_DIM, ACT_DIM, cfg)
    if not guard:
        sac.guard = None
    return sac


def make_replay(capacity: int) -> object | None:
    """
    Fill a prioritized replay buffer with random reach-task transitions.

    :param capacity: transitions stored.
    :returns: the buffer, or ``None`` (with a note) when the replay module is unusable.
    """
    try:
        from async_rl_ros.core.learning.replay import ReplayBuffer, ReplayConfig
        replay = ReplayBuffer(ReplayConfig.from_flat({'capacity': capacity}), OBS_DIM, ACT_DIM)
        rng = np.random.default_rng(0)
        chunk = min(capacity, 50_000)
        for start in range(0, capacity, chunk):
            n = min(chunk, capacity - start)
            replay.extend({
                'obs': rng.standard_normal((n, OBS_DIM), dtype=np.float32),
                'action': rng.uniform(-1, 1, (n, ACT_DIM)).astype(np.float32),
                'reward': -rng.random(n, dtype=np.float32),
                'next_obs': rng.standard_normal((n, OBS_DIM), dtype=np.float32),
                'terminated': rng.random(n) < 0.01,
                'truncated': np.zeros(n, dtype=bool),
                'policy_version': np.zeros(n, dtype=np.int64),
                'worker_id': np.zeros(n, dtype=np.int32)})
        return replay
    except Exception as exc:  # noqa: B902 -- the module is written concurrently; skip it
        print(f'replay column skipped: {type(exc).__name__}: {exc}')
        return None


def replay_step(sac: sac_lib.SAC, replay: object, size: int) -> Callable[[], None]:
    """
    Return one learner iteration: sample, move to the device, update, write priorities back.

    :param sac: the learner.
    :param replay: a filled ``ReplayBuffer``.
    :param size: batch size.
    :returns: the iteration.
    """
    keys = ('obs', 'action', 'reward', 'next_obs', 'terminated')

    def step() -> None:
        indices, arrays, info = replay.sample(size, learner_version=sac.num_updates)
        batch = {k: torch.from_numpy(np.asarray(arrays[k], dtype=np.float32)).to(
            sac.device, non_blocking=True) for k in keys}
        weights = torch.from_numpy(info['weights']).to(sac.device, non_blocking=True)
        _, td_abs = sac.update(batch, weights)
        replay.update_priority(indices, td_abs, info['insert_ids'])

    return step


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
                        help='SACConfig.compile (CUDA only)')
    parser.add_argument('--batch-sizes', type=int, nargs='+', default=[256, 512, 1024])
    parser.add_argument('--seconds', type=float, default=None,
                        help='timed seconds per cell (default 2.5 with --quick, else 10)')
    parser.add_argument('--threads', type=int, default=0,
                        help='torch CPU threads (0: leave torch default)')
    parser.add_argument('--no-guard', action='store_true',
                        help='drop the finite-step guard (saves a sync per optimizer step)')
    parser.add_argument('--no-replay', action='store_true', help='skip the replay column')
    args = parser.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = sac_lib.resolve_device(args.device)
    seconds = args.seconds if args.seconds is not None else (2.5 if args.quick else 10.0)
    warmup = 30 if device.type == 'cuda' else 3
    replay = None if args.no_replay else make_replay(50_000 if args.quick else 500_000)

    print(f'device={device} threads={torch.get_num_threads()} compile={args.compile} '
          f'guard={not args.no_guard} hidden={HIDDEN} seconds/cell={seconds:g}')
    print(f'{"batch":>6} | {"update/s":>10} | {"samples/s":>10} | {"sample+update/s":>15}')
    summary: dict[str, float | None] = {}
    for size in args.batch_sizes:
        sac = make_sac(device, args.compile, not args.no_guard)
        batch = synthetic_batch(size, device)
        ups = rate(lambda: sac.update(batch), seconds, warmup)
        summary[f'updates_per_s_b{size}'] = round(ups, 2)
        with_replay = None
        if replay is not None:
            sac = make_sac(device, args.compile, not args.no_guard)
            with_replay = rate(replay_step(sac, replay, size), seconds, warmup)
            summary[f'updates_with_replay_per_s_b{size}'] = round(with_replay, 2)
        cell = f'{with_replay:15.1f}' if with_replay is not None else f'{"n/a":>15}'
        print(f'{size:>6} | {ups:10.1f} | {ups * size:10.0f} | {cell}')
    summary['device'] = str(device)
    print(json.dumps(summary))
    return summary


if __name__ == '__main__':
    main()
