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
The update-to-data bounds: how many updates the transitions so far allow.

A learner counts its updates against the env steps since it became ready
(:attr:`~async_rl_ros.core.learning.learner.Learner.ready_at`). Fed by free-running workers it
does at most ``max_updates_per_step`` per step (the cap, which binds when data is slow, as
from a physical arm) and, through the workers' rate limit, at least ``min_updates_per_step``
per step (the floor); in lockstep (sync, single process) it does ``updates_per_step``.

``max_updates_ramp_steps`` = R lets that ratio (the cap, or lockstep's) rise linearly with the
run's env steps, from 0 at its first step to its full value at step R. A slow source otherwise
gets the whole cap from the first update: on push with one arm paced to 10 Hz, 4 updates per
transition brought the policy's entropy to its target within 3,000 env steps (75 episodes)
and it learned little in 30,000, while free-running simulated workers, whose learner lags
behind them early, had done 0.08, 0.24 and 0.77 updates per env step by 1,000, 3,000 and
10,000 and learned. Early updates on few data points overfit them and are hard to undo (the primacy
bias, Nikishin et al., 2022); the ramp gives a slow source the early ratio a fast one has.
Lockstep training, whose ratio is whole from its first update, gets it as well: on
``gym:PandaPush-v3`` (seed 1) lockstep runs without it stood at 0.12-0.25 success as far as
they went (42,000-110,000 env steps), and sync with a 10,000-step ramp reached 0.50 at 76,800
where async runs had at 56,000-102,000.

The arithmetic: an env step ``s`` counts ``min(1, s / R)`` of a step, so the steps counted
up to ``s`` are ``s**2 / (2 R)`` below R and ``s - R / 2`` from R on (:func:`counted_steps`,
its inverse :func:`steps_for`). The floor never asks for more updates than the ramped cap
allows, or workers paused by the rate limit would wait for updates the cap forbids.
"""

from __future__ import annotations

import math

__all__ = ['counted_steps', 'steps_for', 'updates_allowed', 'steps_wanted']


def counted_steps(env_steps: float, ramp: int) -> float:
    """
    Return the env steps a ramp over ``ramp`` steps has counted by step ``env_steps``.

    :param env_steps: the run's env steps.
    :param ramp: ``max_updates_ramp_steps`` (0: every step counts whole).
    """
    s = float(env_steps)
    if ramp <= 0:
        return s
    return s * s / (2.0 * ramp) if s < ramp else s - ramp / 2


def steps_for(counted: float, ramp: int) -> float:
    """Return the run's env step by which ``counted`` steps are counted (the inverse)."""
    if ramp <= 0:
        return counted
    if counted >= ramp / 2:
        return counted + ramp / 2
    return math.sqrt(2.0 * ramp * max(counted, 0.0))


def updates_allowed(cap: float, env_steps: int, origin: int, ramp: int) -> float:
    """
    Return the updates the cap allows since the learner became ready at step ``origin``.

    One step ahead of ``env_steps``, so a learner may update as soon as it is ready.
    """
    return cap * (counted_steps(env_steps + 1, ramp) - counted_steps(origin, ramp))


def steps_wanted(updates: int, floor: float, cap: float, origin: int, ramp: int) -> float:
    """
    Return the env step up to which ``updates`` keep the learner at or above its floor.

    The floor is ``floor`` updates per env step since ``origin``, never more than the ramped
    cap allows: the later of the two steps at which each bound is met by ``updates``.
    """
    by_floor = origin + updates / floor
    by_cap = steps_for(counted_steps(origin, ramp) + updates / cap, ramp)
    return max(by_floor, by_cap)
