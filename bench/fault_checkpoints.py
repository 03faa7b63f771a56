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
Single-bit flips in a learner checkpoint (issue 35): every one is found and resume falls back.

A small real learner (SAC with 64-unit layers, some updates done, its replay buffer saved in
the checkpoint) writes two checkpoints with :meth:`Learner.save_checkpoint`: an older good one
and the newest. Then, for each of N random bit positions of the newest file, that one bit is
flipped and a fresh learner resumes with :func:`resume_learner`, the path of ``--resume``.
Each outcome is counted:

* ``ckpt_silent_loads``: the damaged file was loaded without an error (goal 0);
* ``ckpt_fallbacks``: it was skipped, named with a reason, and the learner holds the older
  checkpoint's state;
* ``tracebacks``: anything raised other than the expected fall-back path (goal 0);
* ``ckpt_other``: the rest (e.g. a ``CheckpointError`` although the older checkpoint is good).

Usage: ``python bench/fault_checkpoints.py [--quick] [--flips N]``; the last line printed is
the JSON of :func:`measure`. Other scripts call ``measure(quick)``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
import random
import sys
import tempfile
import time
from typing import Any

from async_rl_ros.core.config import LearnerConfig
from async_rl_ros.core.learning.learner import Learner
from async_rl_ros.core.learning.resume import CheckpointError, resume_learner
import numpy as np
import torch

FLIPS, QUICK_FLIPS = 1000, 200
OBS, ACT = 21, 6
OLDER_STEPS, NEWEST_STEPS = 300, 500


def _learner(directory: Path) -> Learner:
    cfg = LearnerConfig().replace(**{
        'sac.hidden_sizes': [64, 64], 'batch.initial_batch': 64, 'batch.min_batch': 8,
        'replay.capacity': 1000, 'learning_starts': 64, 'checkpoint.save_replay_buffer': True,
        'checkpoint.keep_last': 3, 'checkpoint.directory': str(directory)})
    return Learner(cfg, OBS, ACT)


def _transitions(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    obs = rng.normal(size=(n, OBS)).astype(np.float32)
    action = rng.uniform(-1, 1, size=(n, ACT)).astype(np.float32)
    return {'obs': obs, 'action': action, 'reward': -np.abs(action).sum(1).astype(np.float32),
            'next_obs': obs + 0.1, 'terminated': np.zeros(n, bool),
            'truncated': np.zeros(n, bool), 'policy_version': np.zeros(n, np.int64),
            'worker_id': np.zeros(n, np.int64)}


def _write_checkpoints(directory: Path) -> tuple[Path, Path]:
    """Train a little and save the older and the newest checkpoint."""
    learner = _learner(directory)
    rng = np.random.default_rng(35)
    learner.ingest(_transitions(200, rng))
    for _ in range(3):
        learner.train_step()
    learner.env_steps = OLDER_STEPS
    older = Path(learner.save_checkpoint())
    learner.ingest(_transitions(100, rng))
    learner.train_step()
    learner.env_steps = NEWEST_STEPS
    return older, Path(learner.save_checkpoint())


def measure(quick: bool, flips: int | None = None, seed: int = 35) -> dict[str, Any]:
    """
    Flip single bits of a real learner checkpoint and resume after each.

    :param quick: fewer flips (:data:`QUICK_FLIPS` instead of :data:`FLIPS`).
    :param flips: the number of flips (overrides ``quick``).
    :param seed: picks the bit positions.
    :returns: ``{'ckpt_flips', 'ckpt_silent_loads', 'ckpt_fallbacks', 'tracebacks',
        'ckpt_other', 'ckpt_bytes', 'seconds'}``.
    """
    torch.set_num_threads(1)
    count = flips if flips is not None else (QUICK_FLIPS if quick else FLIPS)
    start = time.monotonic()
    out = {'ckpt_flips': 0, 'ckpt_silent_loads': 0, 'ckpt_fallbacks': 0, 'tracebacks': 0,
           'ckpt_other': 0}
    with tempfile.TemporaryDirectory(prefix='fault_ckpt_') as tmp:
        directory = Path(tmp) / 'ckpt'
        older, newest = _write_checkpoints(directory)
        pristine = newest.read_bytes()
        rng = random.Random(seed)
        learner = _learner(directory)
        for bit in rng.sample(range(len(pristine) * 8), count):
            damaged = bytearray(pristine)
            damaged[bit // 8] ^= 1 << (bit % 8)
            newest.write_bytes(bytes(damaged))
            learner.env_steps = -1
            out['ckpt_flips'] += 1
            try:
                found = resume_learner(learner)
            except CheckpointError:
                out['ckpt_other'] += 1
                continue
            except Exception as exc:  # noqa: B902 -- what the issue counts as a traceback
                out['tracebacks'] += 1
                print(f'bit {bit}: {type(exc).__name__}: {exc}'[:200], file=sys.stderr)
                continue
            if found.path == newest:
                out['ckpt_silent_loads'] += 1
            elif (found.path == older and learner.env_steps == OLDER_STEPS
                  and [p for p, _ in found.skipped] == [newest]):
                out['ckpt_fallbacks'] += 1
            else:
                out['ckpt_other'] += 1
        out['ckpt_bytes'] = len(pristine)
    out['seconds'] = round(time.monotonic() - start, 1)
    return out


def main() -> None:
    """Parse the arguments, measure, print the JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--quick', action='store_true',
                        help=f'{QUICK_FLIPS} flips instead of {FLIPS}')
    parser.add_argument('--flips', type=int, default=None, help='number of single-bit flips')
    args = parser.parse_args()
    print(json.dumps(measure(args.quick, args.flips)))


if __name__ == '__main__':
    main()
