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
Weight compression on the production path: the bytes workers receive during a training run.

Headline: SAC with the shipped defaults learns the simulated UR5 reach task in this process
(single-process loop, ``--warmup-steps`` env steps first); then, every
``parameter_server.commit_every`` (8) updates, its policy is committed through the production
path -- :class:`~async_rl_ros.local.weight_path.LocalWeightPath` (the committer, one process
per shard with 2 shards x 2 replicas, shared-memory boards, the shipped codec) -- and two
:class:`~async_rl_ros.local.weight_path.LocalWeightReceiver` s read what a worker reads: a
*prompt* one that polls after every commit and a *lagging* one that polls after every third
(it misses packets, as a busy worker on a latest-value channel does). For each: packets read
(full / delta), keyframes fetched for a missing base (resyncs), mean bytes per policy version
received next to the float32 actor, and the largest action difference between the received
policy and the learner's (deterministic action, normalization applied, on ``N_OBS``
observations the arm visited during training, every version received). A trained actor is
what sets the precision a codec needs: its first layer and heads are far more sensitive than
a fresh network's.

Then the codec settings on the same weight trajectory (one shard's view: every packet), and
10,000 random single-bit flips of a serialized production delta packet fed to an assembler
that holds its keyframe (the fraction rejected should be 1).

Usage: ``python bench/compression.py [--quick]``. The last line printed is one JSON object,
``{"bytes_fp32", "bytes_codec", "reduction", "max_action_dev", "bitflips_rejected_fraction",
...}``: ``bytes_codec`` is the mean bytes per version the prompt receiver read on the
production path (full and delta packets, keyframe fetches included) and ``reduction`` is
``1 - bytes_codec / bytes_fp32``.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import statistics
import time

from async_rl_ros.core.config import (CodecConfig, EnvWorkerConfig, LearnerConfig,
                                      ParameterServerConfig)
from async_rl_ros.core.learning.learner import Learner
from async_rl_ros.core.learning.networks import PolicyForExport
from async_rl_ros.core.learning.single_process import single_process_loop
from async_rl_ros.core.records import PolicyState
from async_rl_ros.core.weights.assembler import ShardAssembler
from async_rl_ros.core.weights.codec import CodecError
from async_rl_ros.core.weights.sharded_weights import ShardedCommitter, ShardPacket, ShardReplica
from async_rl_ros.envs.factory import build_env
from async_rl_ros.local.weight_path import LocalWeightPath, LocalWeightReceiver
import numpy as np
import torch

N_OBS = 5_000
N_FLIPS = 10_000
LAG = 3  # the lagging receiver polls after every LAG-th commit
DEADLINE_S = 60.0

#: (label, codec settings) of the settings table; the shipped codec is 'default'.
SETTINGS = [
    ('fp32 full', {'quantize': False, 'delta': False}),
    ('int8 full', {'keyframe_bits': 8, 'entropy_coding': 'none', 'delta': False}),
    ('int8+zlib full', {'keyframe_bits': 8, 'delta': False}),
    ('int8 key, d/1', {'keyframe_bits': 8, 'delta_refine': 1}),
    ('12b key, d/4', {'delta_refine': 4}),
    ('default', {}),
    ('12b key, d/16', {'delta_refine': 16}),
    ('16b key, d/8', {'keyframe_bits': 16}),
    ('full_every=20', {'full_every': 20}),
]


def train(seed: int, warmup_steps: int) -> tuple[Learner, object]:
    """Return a learner trained on the reach task for ``warmup_steps`` and its loop."""
    env_cfg = EnvWorkerConfig()
    cfg = LearnerConfig().replace(**{'seed': seed,
                                     'checkpoint.directory': '/tmp/async_rl_bench_compression'})
    env, spec = build_env(env_cfg, training=True)
    learner = Learner(cfg, spec.obs_dim, spec.act_dim, goal_spec=spec.goal)
    loop = single_process_loop(learner, env, seed=seed)
    loop.maybe_publish()
    while learner.env_steps < warmup_steps:
        loop.step()
    return learner, loop


def make_policy(state: PolicyState) -> PolicyForExport:
    """Build a worker's deterministic policy from a policy state."""
    obs_dim, act_dim = len(state.obs_mean), state.actor['mean_head.bias'].shape[0]
    hidden = [v.shape[0] for k, v in state.actor.items() if k.startswith('trunk.')
              and k.endswith('.weight')]
    policy = PolicyForExport(obs_dim, act_dim, tuple(hidden))
    policy.load_actor_state_dict(dict(state.actor))
    policy.set_normalization(torch.as_tensor(state.obs_mean), torch.as_tensor(state.obs_std),
                             state.obs_clip)
    return policy.eval()


def deviation(truth: PolicyState, got: PolicyState, obs: torch.Tensor) -> float:
    """Return the largest action difference between two policy states."""
    with torch.no_grad():
        return float((make_policy(got)(obs) - make_policy(truth)(obs)).abs().max())


def receive(receiver: LocalWeightReceiver, version: int) -> PolicyState:
    """Poll until ``version`` is assembled; return it."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        state = receiver.poll()
        if state is not None and state.version == version:
            return state
        if time.monotonic() > deadline:
            raise SystemExit(f'version {version} never arrived (receiver at '
                             f'{receiver.version})')
        time.sleep(0.001)


def production_run(learner: Learner, loop: object, commits: int, obs: torch.Tensor) -> dict:
    """Train on, publish through the local weight path, receive; return states and counters."""
    ps = ParameterServerConfig()
    obs_dim = learner.obs_dim
    initial = learner.policy_state()
    states = [initial]
    prompt_dev = lag_dev = 0.0
    with LocalWeightPath(ps, CodecConfig(), initial) as path:
        prompt = LocalWeightReceiver(path.board_names, obs_dim)
        lagging = LocalWeightReceiver(path.board_names, obs_dim)
        receive(prompt, initial.version)
        for commit in range(1, commits + 1):
            goal = learner.updates + ps.commit_every
            while learner.updates < goal:
                loop.step()  # the arm steps, the learner updates (2 per transition)
            state = learner.policy_state()
            version = path.publish(state)
            learner.policy_version = version
            truth = dataclasses.replace(state, version=version)
            states.append(truth)
            prompt_dev = max(prompt_dev, deviation(truth, receive(prompt, version), obs))
            if commit % LAG == 0:
                lag_dev = max(lag_dev, deviation(truth, receive(lagging, version), obs))
        stats = path.stats()
        out = {'states': states, 'prompt': prompt.stats(), 'lagging': lagging.stats(),
               'prompt_dev': prompt_dev, 'lag_dev': lag_dev,
               'respawns': stats['weights/shard_respawns']}
        prompt.close()
        lagging.close()
    return out


def codec_setting(states: list[PolicyState], cfg: CodecConfig, obs: torch.Tensor) -> dict:
    """Serve the trajectory from one shard replica with a codec; return sizes and error."""
    committer = ShardedCommitter(ParameterServerConfig(), states[0])
    replica, assembler = ShardReplica(0, 2, cfg), ShardAssembler(len(states[0].obs_mean))
    replica.apply(committer.full(0))
    sizes, dev = [], 0.0
    for i, truth in enumerate(states):
        if i:
            packets = committer.commit(truth)
            if packets is None:
                continue
            replica.apply(packets[0])
        raw = replica.weights().to_bytes()
        sizes.append(len(raw))
        got = assembler.add(ShardPacket.from_bytes(raw))
        if got is not None and (i % 10 == 0 or i == len(states) - 1):
            dev = max(dev, deviation(truth, got, obs))
    return {'bytes': statistics.fmean(sizes), 'max_dev': dev}


def bit_flips(states: list[PolicyState], flips: int, seed: int) -> tuple[float, int]:
    """Flip one random bit of a production delta packet, many times; count rejections."""
    committer = ShardedCommitter(ParameterServerConfig(), states[0])
    replica = ShardReplica(0, 2)
    replica.apply(committer.full(0))
    holder = last = None
    for truth in states:
        packets = committer.commit(truth)
        if packets is not None:
            replica.apply(packets[0])
        served = replica.weights()
        if not served.packet.is_delta:
            holder = ShardAssembler(len(states[0].obs_mean))  # a worker holding this keyframe
            holder.add(served)
        else:
            last = (served.to_bytes(), holder)
    raw, assembler = last
    rng = np.random.default_rng(seed)
    rejected = 0
    for bit in rng.integers(0, 8 * len(raw), size=flips):
        corrupt = bytearray(raw)
        corrupt[bit // 8] ^= 1 << int(bit % 8)
        trial = copy.deepcopy(assembler)
        try:
            trial.add(ShardPacket.from_bytes(bytes(corrupt)))
        except CodecError:
            rejected += 1
    return rejected / flips, len(raw)


def _row(name: str, r: dict, fp32: int, dev: float) -> str:
    versions = r['weights/full_packets'] + r['weights/delta_packets'] - r['weights/resyncs']
    per_version = r['weights/bytes_received'] / max(versions, 1)
    return (f'{name:<10} {r["weights/full_packets"]:>5} {r["weights/delta_packets"]:>6} '
            f'{r["weights/resyncs"]:>8} {per_version:>10.0f} {1 - per_version / fp32:>9.1%} '
            f'{dev:>9.2e}')


def main() -> None:
    """Run the benchmark and print the tables and the JSON summary."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--quick', action='store_true', help='short run (a few minutes)')
    parser.add_argument('--commits', type=int, default=None,
                        help='commits of the training run (default 40 quick, 250)')
    parser.add_argument('--warmup-steps', type=int, default=None,
                        help='env steps of training before the commits are measured '
                             '(default 3,000 quick, 12,000)')
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    commits = args.commits if args.commits is not None else (40 if args.quick else 250)
    warmup = args.warmup_steps if args.warmup_steps is not None else (
        3_000 if args.quick else 12_000)
    start = time.perf_counter()
    learner, loop = train(args.seed, warmup)
    visited = learner.replay.storage.obs[:len(learner.replay)]
    rng = np.random.default_rng(args.seed)
    obs = torch.as_tensor(visited[rng.choice(len(visited), min(N_OBS, len(visited)),
                                             replace=False)])
    trained_s = time.perf_counter() - start

    run = production_run(learner, loop, commits, obs)
    states = run['states']
    fp32 = sum(v.nbytes for v in states[0].tensors().values())
    cfg = CodecConfig()
    hidden = '-'.join(str(int(h)) for h in learner.cfg.sac.hidden_sizes)
    print(f'SAC actor {learner.obs_dim}-{hidden}-{learner.act_dim} trained on the reach task '
          f'for {warmup} env steps ({trained_s:.0f} s): {fp32} bytes in float32; {commits} '
          f'commits every {ParameterServerConfig().commit_every} updates through '
          f'LocalWeightPath (2 shards x 2 replicas, codec keyframe_bits={cfg.keyframe_bits}, '
          f'delta_refine={cfg.delta_refine}, full_every={cfg.full_every})'
          f'{" (--quick)" if args.quick else ""}\n')
    header = (f'{"receiver":<10} {"full":>5} {"delta":>6} {"resyncs":>8} {"B/version":>10} '
              f'{"reduction":>9} {"max |da|":>9}')
    print(header)
    print('-' * len(header))
    print(_row('prompt', run['prompt'], fp32, run['prompt_dev']))
    print(_row(f'lag x{LAG}', run['lagging'], fp32, run['lag_dev']))
    print('B/version: bytes read (keyframe fetches included) per policy version received\n')

    print(f'{"codec setting":<16} {"B/packet":>9} {"reduction":>9} {"max |da|":>9}')
    for label, flat in SETTINGS:
        res = codec_setting(states, CodecConfig(**flat), obs)
        print(f'{label:<16} {res["bytes"]:>9.0f} {1 - res["bytes"] / fp32:>9.1%} '
              f'{res["max_dev"]:>9.2e}')
    fraction, size = bit_flips(states, N_FLIPS, args.seed)
    print(f'\n{N_FLIPS} single-bit flips of a {size}-byte production delta packet: '
          f'{fraction:.2%} rejected')
    print(f'wall time {time.perf_counter() - start:.1f} s')
    prompt = run['prompt']
    versions = prompt['weights/full_packets'] + prompt['weights/delta_packets'] - \
        prompt['weights/resyncs']
    per_version = prompt['weights/bytes_received'] / versions
    lag = run['lagging']
    lag_versions = lag['weights/full_packets'] + lag['weights/delta_packets'] - \
        lag['weights/resyncs']
    print(json.dumps({
        'bytes_fp32': fp32, 'bytes_codec': round(per_version),
        'reduction': round(1 - per_version / fp32, 4),
        'max_action_dev': max(run['prompt_dev'], run['lag_dev']),
        'bitflips_rejected_fraction': fraction,
        'reduction_lagging': round(1 - lag['weights/bytes_received'] / lag_versions / fp32, 4),
        'delta_fraction': round(prompt['weights/delta_packets'] / (
            prompt['weights/delta_packets'] + prompt['weights/full_packets']), 4),
        'commits': commits, 'warmup_steps': warmup, 'quick': args.quick}))


if __name__ == '__main__':
    main()
