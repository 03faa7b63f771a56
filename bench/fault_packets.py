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
Crafted weight packets with a valid CRC, fed to a worker's receiver (issue 35).

A worker's :class:`~async_rl_ros.core.weights.receiver.WeightReceiver` is told its own
policy's layout (:class:`~async_rl_ros.core.weights.expect.Expectation`) and holds a policy
of a real two-shard run. Each case puts one crafted packet (a forged version, another
network's layout, a layout of 10^12 floats, shard 7 of 2, weights of 3e38, ``obs_std`` of
1e-30, a delta without extras, another run's delta ...) on a shard's board, sealed with a
valid CRC, and polls the receiver: the packet must be rejected or ignored and counted by
reason, change neither the version nor the policy, and the next real packet must still be
assembled. The CPU time of the poll that read the crafted packet is measured.

Usage: ``python bench/fault_packets.py [--quick]``. One line per case, then a JSON line:
``{"packets_crafted": N, "packets_accepted": N, "packets_uncounted": N,
"max_packet_cpu_s": s}`` (``packets_uncounted``: crafted packets neither used, rejected nor
ignored by a counted reason; goals: 0 accepted, 0 uncounted, at most 0.05 s).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from typing import Any, Callable
import zlib

from async_rl_ros.core.config import CodecConfig, ParameterServerConfig
from async_rl_ros.core.records import PolicyState
from async_rl_ros.core.weights.codec import ENCODING_INT8_ZLIB, QuantizedTensor
from async_rl_ros.core.weights.expect import Expectation
from async_rl_ros.core.weights.receiver import InProcessWeightPath
from async_rl_ros.core.weights.sharded_weights import ShardPacket
import numpy as np
import torch

OBS_DIM, SHARDS = 21, 2


def actor_tensors(rng: np.random.Generator, scale: float = 0.1) -> dict[str, np.ndarray]:
    """Return a small actor's tensors (the layout every worker here expects)."""
    return {'trunk.0.weight': scale * rng.normal(size=(64, OBS_DIM)).astype(np.float32),
            'trunk.0.bias': scale * rng.normal(size=64).astype(np.float32),
            'mean_head.weight': scale * rng.normal(size=(6, 64)).astype(np.float32),
            'mean_head.bias': scale * rng.normal(size=6).astype(np.float32)}


def policy_state(actor: dict[str, np.ndarray], version: int = 0) -> PolicyState:
    """Return the policy state of ``actor`` with sane normalizer statistics."""
    return PolicyState(actor={k: torch.as_tensor(v) for k, v in actor.items()},
                       obs_mean=np.zeros(OBS_DIM, np.float32),
                       obs_std=np.ones(OBS_DIM, np.float32), obs_clip=5.0, version=version)


class Rig:
    """
    A real run (committer, two shard replicas, boards) and a worker's receiver on it.

    :param expect: give the receiver its policy's layout (else: bounds, first layout pinned).
    :param seed: seed of the weights.
    """

    def __init__(self, expect: bool = True, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.actor = actor_tensors(self.rng)
        cfg = ParameterServerConfig(num_shards=SHARDS, replicas=2, chunk_size=500)
        self.path = InProcessWeightPath(cfg, CodecConfig(full_every=4), policy_state(self.actor))
        self.expect = (Expectation.of_tensors(self.actor, OBS_DIM, num_shards=SHARDS)
                       if expect else Expectation(obs_dim=OBS_DIM))
        self.receiver = self.path.receiver(OBS_DIM, self.expect)
        assert self.receiver.poll() is not None
        for _ in range(2):  # a keyframe and a delta on it
            self.step()

    @property
    def run_id(self) -> int:
        """Return the run's id."""
        return self.path.committer.run_id

    def step(self) -> PolicyState:
        """Commit a changed policy; return what the receiver assembles (it must)."""
        self.actor = {k: v + 0.01 * self.rng.normal(size=v.shape).astype(np.float32)
                      for k, v in self.actor.items()}
        version = self.path.publish(policy_state(self.actor))
        state = self.receiver.poll()
        assert state is not None and state.version == version, (state, version)
        return state

    def full(self, shard: int = 0, version: int | None = None, **fields: Any) -> ShardPacket:
        """Return a sane full packet of ``shard`` at the next version, fields replaced."""
        sp = self.path.committer.full(shard)
        packet = dataclasses.replace(sp.packet, version=self.path.version + 1
                                     if version is None else version)
        return dataclasses.replace(sp, packet=packet, **fields)

    def served(self, shard: int = 0) -> ShardPacket:
        """Return the packet the shard serves now (a delta on its keyframe, or one)."""
        return self.path.replicas[shard].serve()

    def feed(self, sp: ShardPacket | bytes, shard: int = 0, seal: bool = True) -> float:
        """Put a packet on the shard's latest board, poll once; return the CPU seconds."""
        data = sp if isinstance(sp, bytes) else (sp.seal() if seal else sp).to_bytes()
        version = 2 ** 62 if isinstance(sp, bytes) else sp.packet.version
        self.path.boards[shard][0].publish(data, min(version, 2 ** 62))
        start = time.process_time()
        state = self.receiver.poll()
        cpu = time.process_time() - start
        assert state is None, 'a crafted packet completed a policy'
        return cpu

    def counts(self) -> tuple[int, int, int, int]:
        """Return (accepted, rejected, ignored, held waiting) of the receiver."""
        r = self.receiver
        return (r.accepted, r.rejected, sum(r.ignored_counts().values()), len(r._waiting))


def _tensors(sp: ShardPacket, fn: Callable[[np.ndarray], np.ndarray]) -> list[QuantizedTensor]:
    out = []
    for t in sp.packet.tensors:
        values = fn(t.values().copy())
        out.append(QuantizedTensor(t.name, t.shape, t.encoding, t.scales, t.zero_points,
                                   np.asarray(values, '<f4').tobytes()))
    return out


def _with(rig: Rig, sp: ShardPacket, **packet_fields: Any) -> ShardPacket:
    return dataclasses.replace(sp, packet=dataclasses.replace(sp.packet, **packet_fields))


def _extras(rig: Rig, **changes: Any) -> ShardPacket:
    sp = rig.full()
    extras = {**sp.packet.extras, **changes}
    return _with(rig, sp, extras={k: v for k, v in extras.items() if v is not None})


def _values(rig: Rig, value: float) -> ShardPacket:
    sp = rig.full()

    def poke(x: np.ndarray) -> np.ndarray:
        x.reshape(-1)[0] = value
        return x
    return _with(rig, sp, tensors=_tensors(sp, poke))


def _other_net(rig: Rig) -> dict[str, tuple[int, ...]]:
    return {**rig.path.committer.layout, 'trunk.0.weight': (128, OBS_DIM),
            'trunk.0.bias': (128,)}


def _bomb(rig: Rig) -> ShardPacket:
    sp = rig.full()
    t = sp.packet.tensors[0]
    payload = zlib.compress(bytes(50 * t.numel), 9)  # inflates 50 times past the tensor
    bomb = QuantizedTensor(t.name, t.shape, ENCODING_INT8_ZLIB, np.ones(1, np.float32),
                           np.zeros(1, np.uint8), payload)
    return _with(rig, sp, tensors=[bomb] + sp.packet.tensors[1:])


def _retired(rig: Rig) -> ShardPacket:
    for _ in range(3):  # past the first keyframe: a restart from version 0 is below it
        rig.step()
    old = rig.full()  # of the run about to be replaced
    committer = rig.path.committer  # a learner restart: a new run id, versions from 0
    committer.run_id, committer.version = committer.run_id ^ 0x5A5A, 0
    for shard in range(SHARDS):
        rig.path._apply(committer.full(shard))
    state = rig.receiver.poll()
    assert state is not None and state.version == 0, state
    return old


#: name -> (what it is, the reason it is counted under, the crafted packet)
CASES: dict[str, tuple[str, str, Callable[[Rig], ShardPacket]]] = {
    'version-2^62': ('a keyframe at version 2^62', 'version',
                     lambda r: r.full(version=2 ** 62)),
    'version-2^62-delta': ('a delta at version 2^62', 'version',
                           lambda r: _with(r, r.served(), version=2 ** 62)),
    'version-2^62-new-run': ('a keyframe of another run at version 2^62', 'version',
                             lambda r: r.full(version=2 ** 62, run_id=r.run_id + 1)),
    'version-negative': ('a keyframe at version -5', 'version', lambda r: r.full(version=-5)),
    'version-too-far': ('a keyframe 10^6 versions past the keyframe held', 'version',
                        lambda r: r.full(version=r.path.version + 10 ** 6)),
    'version-stale': ('a keyframe older than the policy held', 'older',
                      lambda r: r.full(version=r.path.version - 1)),
    'version-duplicate': ('the packet held, again', 'same_version', lambda r: r.served()),
    'base-below-minus-one': ('base_version -7', 'base_version',
                             lambda r: _with(r, r.served(), base_version=-7,
                                             version=r.path.version + 1)),
    'base-not-below-version': ('base_version above its version', 'base_version',
                               lambda r: _with(r, r.served(), base_version=r.path.version + 5,
                                               version=r.path.version + 1)),
    'base-not-held': ('a delta on a keyframe not held (nor on the keyframe board)',
                      'superseded', lambda r: _with(r, r.served(), version=r.path.version + 1,
                                                    base_version=r.path.version - 1)),
    'layout-other-net': ('the layout of a wider network', 'layout',
                         lambda r: r.full(layout=_other_net(r))),
    'layout-other-net-older': ('another network at an older version', 'older',
                               lambda r: r.full(layout=_other_net(r), version=0)),
    'layout-other-net-new-run': ('another network from a new run', 'layout',
                                 lambda r: r.full(layout=_other_net(r),
                                                  run_id=r.run_id + 1)),
    'layout-extra-tensor': ('a layout with one more tensor', 'layout',
                            lambda r: r.full(layout={**r.path.committer.layout, 'x': (3,)})),
    'layout-missing-tensor': ('a layout with one tensor less', 'layout',
                              lambda r: r.full(layout={k: v for k, v in
                                                       r.path.committer.layout.items()
                                                       if k != 'mean_head.bias'})),
    'layout-10^6-squared': ('a layout of (10^6, 10^6)', 'layout',
                            lambda r: r.full(layout={'w': (10 ** 6, 10 ** 6)})),
    'layout-10^5-squared': ('a layout of (10^5, 10^5)', 'layout',
                            lambda r: r.full(layout={'w': (10 ** 5, 10 ** 5)})),
    'layout-10^6-new-run': ('a new run of (10^6, 10^6)', 'layout',
                            lambda r: r.full(layout={'w': (10 ** 6, 10 ** 6)},
                                             run_id=r.run_id + 1)),
    'chunk-zero': ('chunk size 0', 'layout', lambda r: r.full(chunk_size=0)),
    'chunk-one': ('chunk size 1 within the run', 'layout', lambda r: r.full(chunk_size=1)),
    'chunk-huge': ('chunk size 2^32 - 1 within the run', 'layout',
                   lambda r: r.full(chunk_size=2 ** 32 - 1)),
    'shard-7-of-2': ('shard 7 of 2', 'shard', lambda r: r.full(shard_id=7)),
    'shards-zero': ('0 shards', 'shard', lambda r: r.full(num_shards=0)),
    'shards-three': ('3 shards where the worker reads 2', 'shard',
                     lambda r: r.full(num_shards=3)),
    'weights-3e38': ('finite weights of 3e38', 'bounds', lambda r: _values(r, 3e38)),
    'weights-1e7': ('weights of 1e7', 'bounds', lambda r: _values(r, 1e7)),
    'weights-nan': ('a NaN weight', 'non_finite', lambda r: _values(r, float('nan'))),
    'weights-inf': ('an infinite weight', 'non_finite', lambda r: _values(r, float('inf'))),
    'std-1e-30': ('obs_std of 1e-30', 'extras',
                  lambda r: _extras(r, obs_std=np.full(OBS_DIM, 1e-30, np.float32))),
    'std-zero': ('obs_std of 0', 'extras',
                 lambda r: _extras(r, obs_std=np.zeros(OBS_DIM, np.float32))),
    'std-negative': ('obs_std of -1', 'extras',
                     lambda r: _extras(r, obs_std=-np.ones(OBS_DIM, np.float32))),
    'std-nan': ('obs_std of NaN', 'extras',
                lambda r: _extras(r, obs_std=np.full(OBS_DIM, np.nan, np.float32))),
    'mean-inf': ('obs_mean of inf', 'extras',
                 lambda r: _extras(r, obs_mean=np.full(OBS_DIM, np.inf, np.float32))),
    'mean-1e30': ('obs_mean of 1e30', 'extras',
                  lambda r: _extras(r, obs_mean=np.full(OBS_DIM, 1e30, np.float32))),
    'mean-width': ('obs_mean of 20 values for 21 observations', 'extras',
                   lambda r: _extras(r, obs_mean=np.zeros(OBS_DIM - 1, np.float32))),
    'clip-zero': ('obs_clip of 0', 'extras', lambda r: _extras(r, obs_clip=np.float32(0))),
    'clip-1e30': ('obs_clip of 1e30', 'extras',
                  lambda r: _extras(r, obs_clip=np.float32(1e30))),
    'clip-two': ('obs_clip of two values', 'extras',
                 lambda r: _extras(r, obs_clip=np.ones(2, np.float32))),
    'extras-none-delta': ('a delta without extras', 'extras',
                          lambda r: _with(r, r.served(), version=r.path.version + 1,
                                          extras={})),
    'extras-unknown': ('an unknown extra name', 'extras',
                       lambda r: _extras(r, gain=np.ones(3, np.float32))),
    'extras-missing-clip': ('no obs_clip', 'extras', lambda r: _extras(r, obs_clip=None)),
    'tensor-unknown': ('a tensor that is no partition', 'shape',
                       lambda r: _with(r, r.full(), tensors=[dataclasses.replace(
                           r.full().packet.tensors[0], name='evil#0')])),
    'tensor-shape': ('a partition in the wrong shape', 'shape',
                     lambda r: _with(r, r.full(), tensors=[dataclasses.replace(
                         t, shape=(t.numel,)) if len(t.shape) == 2 else t
                         for t in r.full().packet.tensors])),
    'tensor-twice': ('a partition twice', 'format',
                     lambda r: _with(r, r.full(), tensors=r.full().packet.tensors * 2)),
    'encoding-unknown': ('encoding 9', 'encoding',
                         lambda r: _with(r, r.full(), tensors=[dataclasses.replace(
                             r.full().packet.tensors[0], encoding=9)])),
    'zlib-bomb': ('a zlib stream 50 times its tensor', 'encoding', _bomb),
    'delta-new-run': ('a delta of another run', 'run_id',
                      lambda r: _with(r, dataclasses.replace(r.served(),
                                                             run_id=r.run_id + 1),
                                      version=r.path.version + 1)),
    'retired-run': ('a keyframe of the run a restart replaced', 'run_id', _retired),
}


def run_case(name: str, expect: bool = True) -> dict[str, Any]:
    """Feed one crafted packet to a fresh rig; return what became of it."""
    what, reason, craft = CASES[name]
    rig = Rig(expect)
    packet = craft(rig)
    version, before = rig.receiver.version, rig.counts()
    reasons_before = rig.receiver.rejections() + rig.receiver.ignored_counts()
    policy = {k: v.copy() for k, v in rig.receiver.assembler.decoders[0].tensors.items()}
    cpu = rig.feed(packet)
    after = rig.counts()
    accepted, rejected, ignored, waiting = (a - b for a, b in zip(after, before))
    unchanged = rig.receiver.version == version and all(
        np.array_equal(v, rig.receiver.assembler.decoders[0].tensors[k])
        for k, v in policy.items())
    rig.step()  # the next real packet is still assembled
    after_real = rig.counts()
    if waiting:  # a delta held for its keyframe: the real packet supersedes it, counted
        ignored += after_real[2] - after[2]
    reasons = rig.receiver.rejections() + rig.receiver.ignored_counts() - reasons_before
    return {'case': name, 'what': what, 'expected': reason, 'accepted': accepted,
            'counted': rejected + ignored, 'reason_seen': reasons[reason] > 0,
            'unchanged': unchanged, 'cpu_s': cpu}


def measure(quick: bool = False) -> dict[str, Any]:
    """
    Feed every crafted packet to a worker's receiver.

    :param quick: the same cases (they take about a second together).
    :returns: ``packets_crafted``, ``packets_accepted``, ``packets_uncounted``,
        ``max_packet_cpu_s`` and ``cases`` (one record per case).
    """
    del quick  # every case is cheap: quick mode runs them all
    results = [run_case(name) for name in CASES]
    results.append(dict(run_case('layout-10^6-squared', expect=False),
                        case='layout-10^6-no-expectation'))
    return {'packets_crafted': len(results),
            'packets_accepted': sum(r['accepted'] > 0 for r in results),
            'packets_uncounted': sum(r['accepted'] == 0 and r['counted'] < 1
                                     for r in results),
            'max_packet_cpu_s': round(max(r['cpu_s'] for r in results), 4),
            'cases': results}


def main(argv: list[str] | None = None) -> int:
    """Run every case, print one line each and the JSON summary last."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--quick', action='store_true', help='the same cases (all are quick)')
    args = parser.parse_args(argv)
    result = measure(args.quick)
    for r in result.pop('cases'):
        ok = (r['accepted'] == 0 and r['counted'] >= 1 and r['reason_seen']
              and r['unchanged'])
        print(f"{'ok  ' if ok else 'FAIL'} {r['case']:<28} {r['expected']:<12} "
              f"cpu {r['cpu_s'] * 1e3:7.2f} ms  {r['what']}")
    print(json.dumps(result))
    return 0 if result['packets_accepted'] == result['packets_uncounted'] == 0 else 1


if __name__ == '__main__':
    sys.exit(main())
