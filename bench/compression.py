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
Weight codec: bytes per policy commit, action error and robustness of each codec setting.

The actor is the reach task's (observation 21, action 6, hidden 256x256). It is trained
for a while with Adam (lr 3e-4, batch 256) to imitate a random teacher policy, so that its
weights and, above all, the changes between two commits look like those of SAC training.
Then ``--commits`` commits follow, ``--updates-per-commit`` Adam updates apart, and every
codec setting encodes the same sequence of weights (the whole actor state dict, log-std
head included, plus the normalizer statistics). For each setting the table gives:

* ``bytes``: serialized packet size; mean over the delta packets for delta rows (the
  first packet and every ``full_every``-th are full ones, left out: the steady state);
* ``reduction``: ``1 - bytes / fp32 bytes``, where fp32 bytes are 4 per actor parameter;
* ``max |da|``: largest action difference over 10,000 observations between the decoded
  policy and the true one (deterministic ``PolicyForExport``), over every commit;
* ``enc ms`` / ``dec ms``: median time of ``encode + to_bytes`` / ``from_bytes + apply``.

A second table shows how the steady-state delta size of the default codec depends on the
number of updates between commits. Last, 10,000 random single-bit flips of the default
codec's serialized delta packet are fed to a decoder holding the base version; the
fraction rejected should be 1.

Usage: ``python bench/compression.py [--quick]`` (``--quick``: < 1 minute). The last line
printed is one JSON object, ``{"bytes_fp32": ..., "bytes_codec": ..., "reduction": ...,
"max_action_dev": ..., "bitflips_rejected_fraction": ...}``, where ``bytes_codec`` and
``reduction`` are those of the default codec (int8 per-channel deltas with zlib) in steady
state.
"""

from __future__ import annotations

import argparse
import collections
import copy
import json
import statistics
import time

from async_rl_ros.core.learning.networks import Actor, PolicyForExport
from async_rl_ros.core.weights.codec import CodecConfig, CodecError, WeightDecoder, WeightEncoder
import numpy as np
import torch

OBS_DIM, ACT_DIM, HIDDEN = 21, 6, (256, 256)
N_OBS = 10_000
N_FLIPS = 10_000

#: (label, what the row means, codec settings); the default codec is 'delta+zlib'.
SETTINGS = [
    ('fp32', 'full packets, raw float32', {'quantize': False, 'delta': False}),
    ('int8/tensor', 'full, int8, one scale per tensor',
     {'per_channel': False, 'entropy_coding': 'none', 'delta': False}),
    ('int8/channel', 'full, int8, one scale per output row',
     {'entropy_coding': 'none', 'delta': False}),
    ('int8/tensor+zlib', 'full, int8 per tensor, zlib', {'per_channel': False, 'delta': False}),
    ('int8/channel+zlib', 'full, int8 per row, zlib', {'delta': False}),
    ('delta+zlib', 'DEFAULT: int8 per-row deltas on the weight grid, zlib', {}),
    ('delta(fine)+zlib', 'int8 deltas, 254 steps over each delta row, zlib',
     {'delta_grid': 'delta'}),
]


def train(actor: Actor, teacher: Actor, optimizer: torch.optim.Optimizer, steps: int,
          rng: torch.Generator) -> None:
    """Run Adam steps that pull the actor's mean and log-std towards the teacher's."""
    for _ in range(steps):
        obs = torch.randn(256, OBS_DIM, generator=rng)
        with torch.no_grad():
            mean_t, log_std_t = teacher(obs)
        mean, log_std = actor(obs)
        loss = (torch.tanh(mean) - torch.tanh(mean_t)).pow(2).mean() + \
            0.1 * (log_std - log_std_t).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def snapshot(actor: Actor) -> dict[str, np.ndarray]:
    """Copy the actor state dict to float32 numpy arrays."""
    return {k: v.detach().cpu().numpy().copy() for k, v in actor.state_dict().items()}


def trajectory(pretrain: int, commits: int, updates_per_commit: int, seed: int
               ) -> list[dict[str, np.ndarray]]:
    """Return ``commits + 1`` actor snapshots taken ``updates_per_commit`` updates apart."""
    torch.manual_seed(seed)
    actor, teacher = Actor(OBS_DIM, ACT_DIM, HIDDEN), Actor(OBS_DIM, ACT_DIM, HIDDEN)
    rng = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(actor.parameters(), lr=3e-4)
    train(actor, teacher, optimizer, pretrain, rng)
    states = [snapshot(actor)]
    for _ in range(commits):
        train(actor, teacher, optimizer, updates_per_commit, rng)
        states.append(snapshot(actor))
    return states


def make_policy(tensors: dict[str, np.ndarray], extras: dict[str, np.ndarray]
                ) -> PolicyForExport:
    """Build the worker's deterministic policy from decoded tensors and extras."""
    policy = PolicyForExport(OBS_DIM, ACT_DIM, HIDDEN)
    policy.load_actor_state_dict({k: torch.from_numpy(np.array(v)) for k, v in tensors.items()})
    policy.set_normalization(torch.as_tensor(extras['obs_mean']),
                             torch.as_tensor(extras['obs_std']), float(extras['obs_clip']))
    return policy.eval()


def run_setting(states: list[dict[str, np.ndarray]], extras: dict[str, np.ndarray],
                cfg: CodecConfig, obs: torch.Tensor, check_every: int = 1) -> dict:
    """Encode the whole trajectory with one setting; return sizes, error and times."""
    encoder, decoder = WeightEncoder(cfg), WeightDecoder()
    sizes, deltas, enc_ms, dec_ms, dev = [], [], [], [], 0.0
    for version, state in enumerate(states):
        start = time.perf_counter()
        packet = encoder.encode(state, version, extras)
        raw = packet.to_bytes()
        enc_ms.append(1e3 * (time.perf_counter() - start))
        start = time.perf_counter()
        decoded = decoder.apply_bytes(raw)
        dec_ms.append(1e3 * (time.perf_counter() - start))
        (deltas if packet.is_delta else sizes).append(len(raw))
        if version % check_every == 0 or version == len(states) - 1:
            with torch.no_grad():
                truth = make_policy(state, extras)(obs)
                got = make_policy(decoded, decoder.extras)(obs)
            dev = max(dev, float((got - truth).abs().max()))
    return {'bytes': statistics.fmean(deltas or sizes), 'bytes_full': statistics.fmean(sizes),
            'max_dev': dev,
            'enc_ms': statistics.median(enc_ms), 'dec_ms': statistics.median(dec_ms)}


def bit_flips(states: list[dict[str, np.ndarray]], extras: dict[str, np.ndarray],
              flips: int, seed: int) -> tuple[float, collections.Counter, int]:
    """Flip one random bit of the last default delta packet, many times; count rejections."""
    encoder, decoder = WeightEncoder(CodecConfig(full_every=10**9)), WeightDecoder()
    for version, state in enumerate(states[:-1]):
        decoder.apply_bytes(encoder.encode(state, version, extras).to_bytes())
    packet = encoder.encode(states[-1], len(states) - 1, extras)
    assert packet.is_delta
    raw = packet.to_bytes()
    pristine = copy.deepcopy(decoder)
    rng = np.random.default_rng(seed)
    rejected = 0
    for bit in rng.integers(0, 8 * len(raw), size=flips):
        corrupt = bytearray(raw)
        corrupt[bit // 8] ^= 1 << int(bit % 8)
        try:
            decoder.apply_bytes(bytes(corrupt))
            decoder = copy.deepcopy(pristine)
        except CodecError:
            rejected += 1
    return rejected / flips, decoder.rejected, len(raw)


def main() -> None:
    """Run the benchmark and print the tables and the JSON summary."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--quick', action='store_true', help='short run (< 1 minute)')
    parser.add_argument('--pretrain', type=int, default=None,
                        help='Adam updates before the first commit (default 200 quick, 1000)')
    parser.add_argument('--commits', type=int, default=None,
                        help='commits after the first (default 8 quick, 50)')
    parser.add_argument('--updates-per-commit', type=int, default=10,
                        help='Adam updates between two commits (default 10)')
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    pretrain = args.pretrain if args.pretrain is not None else (200 if args.quick else 1000)
    commits = args.commits if args.commits is not None else (8 if args.quick else 50)

    start = time.perf_counter()
    states = trajectory(pretrain, commits, args.updates_per_commit, args.seed)
    rng = np.random.default_rng(args.seed)
    extras = {'obs_mean': rng.normal(0, 0.5, OBS_DIM).astype(np.float32),
              'obs_std': rng.uniform(0.5, 2.0, OBS_DIM).astype(np.float32),
              'obs_clip': np.float32(5.0)}
    obs = torch.as_tensor(extras['obs_mean'] + extras['obs_std'] *
                          rng.normal(size=(N_OBS, OBS_DIM)), dtype=torch.float32)
    n_params = sum(v.size for v in states[0].values())
    bytes_fp32 = 4 * n_params
    print(f'actor {OBS_DIM}-{HIDDEN[0]}-{HIDDEN[1]}-{ACT_DIM}: {n_params} parameters, '
          f'{bytes_fp32} bytes in float32; {pretrain} Adam updates, then {commits} commits '
          f'{args.updates_per_commit} updates apart{" (--quick)" if args.quick else ""}')
    print(f'max |da| over {N_OBS} observations, every commit; delta rows: mean bytes of the '
          'delta packets (steady state)\n')
    header = f'{"setting":<18} {"bytes":>9} {"reduction":>9} {"max |da|":>9} ' \
             f'{"enc ms":>7} {"dec ms":>7}  meaning'
    print(header)
    print('-' * len(header))
    check_every = 4 if args.quick else 5
    results = {}
    for label, meaning, flat in SETTINGS:
        cfg = CodecConfig(**flat)
        seq = states if cfg.delta else states[::check_every]
        res = run_setting(seq, extras, cfg, obs, check_every=1 if not cfg.delta else
                          check_every)
        results[label] = res
        print(f'{label:<18} {res["bytes"]:>9.0f} {1 - res["bytes"] / bytes_fp32:>9.1%} '
              f'{res["max_dev"]:>9.2e} {res["enc_ms"]:>7.2f} {res["dec_ms"]:>7.2f}  {meaning}')
    default = results['delta+zlib']
    full_every = CodecConfig().full_every
    amortized = (default['bytes_full'] + (full_every - 1) * default['bytes']) / full_every
    print(f'{"amortized":<18} {amortized:>9.0f} {1 - amortized / bytes_fp32:>9.1%} '
          f'{"":>9} {"":>7} {"":>7}  DEFAULT incl. one full packet every {full_every}')

    print('\nsteady-state delta bytes of the default codec vs updates between commits')
    sweep = [1, 10, 100] if args.quick else [1, 10, 100, 1000]
    sweep_commits = 3 if args.quick else 10
    for upc in sweep:
        seq = trajectory(pretrain, sweep_commits, upc, args.seed + 1)
        res = run_setting(seq, extras, CodecConfig(), obs, check_every=10**9)
        print(f'  {upc:>5} updates/commit: {res["bytes"]:>8.0f} bytes '
              f'({1 - res["bytes"] / bytes_fp32:.1%} fewer than fp32), max |da| at the first '
              f'and last commit {res["max_dev"]:.2e}')

    fraction, reasons, size = bit_flips(states, extras, N_FLIPS, args.seed)
    print(f'\n{N_FLIPS} single-bit flips of a {size}-byte delta packet: {fraction:.2%} rejected '
          f'({", ".join(f"{k} {v}" for k, v in sorted(reasons.items()))})')
    print(f'wall time {time.perf_counter() - start:.1f} s')
    print(json.dumps({'bytes_fp32': bytes_fp32, 'bytes_codec': round(default['bytes']),
                      'reduction': round(1 - default['bytes'] / bytes_fp32, 4),
                      'max_action_dev': default['max_dev'],
                      'bitflips_rejected_fraction': fraction,
                      'reduction_amortized': round(1 - amortized / bytes_fp32, 4),
                      'reduction_full_packet': round(1 - default['bytes_full'] / bytes_fp32, 4),
                      'updates_per_commit': args.updates_per_commit, 'quick': args.quick}))


if __name__ == '__main__':
    main()
