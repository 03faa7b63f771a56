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

"""The update-to-data bounds and their ramp (``max_updates_ramp_steps``), in every mode."""

from async_rl_ros.core.learning.learner import Learner
from async_rl_ros.core.learning.loop import Received
from async_rl_ros.core.learning.ratio import (counted_steps, steps_for, steps_wanted,
                                              updates_allowed)
from conftest import scripted_loop, tiny_config, transitions
import numpy as np
import pytest
import torch

torch.set_num_threads(1)  # tiny networks; a busy machine's cores are not contended for


def test_without_a_ramp_the_bounds_are_the_plain_ratios():
    assert updates_allowed(4.0, 1000, 200, 0) == 4.0 * 801
    assert steps_wanted(300, 1.0, 4.0, 200, 0) == 500  # the floor: one step per update
    assert steps_wanted(300, 0.5, 4.0, 200, 0) == 800


def test_the_ramp_counts_steps_by_a_linear_rise_and_inverts():
    ramp = 25_000
    assert counted_steps(0, ramp) == 0.0
    assert counted_steps(1000, ramp) == 20.0          # 1000**2 / 50000: 0.02 of the steps
    assert counted_steps(ramp, ramp) == ramp / 2      # the two pieces meet
    assert counted_steps(100_000, ramp) == 87_500     # past the ramp: R / 2 steps behind
    for steps in (0.0, 1.0, 3000.0, 12_499.0, 25_000.0, 60_000.0):
        assert steps_for(counted_steps(steps, ramp), ramp) == pytest.approx(steps)
    # the cap it gives at 4 per step: the early ratios of free-running simulated workers
    assert updates_allowed(4.0, 3000, 0, ramp) / 3000 == pytest.approx(0.24, rel=0.01)
    assert updates_allowed(4.0, 10_000, 0, ramp) / 10_000 == pytest.approx(0.80, rel=0.01)
    # a run resumed past the ramp (ready again at 50,000) gets the whole cap at once
    assert updates_allowed(4.0, 50_100, 50_000, ramp) == 4.0 * 101


@pytest.mark.parametrize('seed', range(5))
def test_the_rate_limit_never_waits_for_updates_the_ramped_cap_forbids(seed):
    """Workers stopped by the floor always leave the learner an update it may do."""
    rng = np.random.default_rng(seed)
    for _ in range(2000):
        ramp = int(rng.choice([0, 1000, 25_000, 10**6]))
        cap = float(rng.uniform(0.1, 8.0))
        floor = float(rng.uniform(0.01, cap))
        origin, updates = int(rng.integers(0, 50_000)), int(rng.integers(0, 10**6))
        stop = int(steps_wanted(updates, floor, cap, origin, ramp)) + 1  # slack 1
        assert updates_allowed(cap, stop, origin, ramp) > updates


@pytest.mark.parametrize('blocking', [False, True], ids=['free-running', 'lockstep'])
def test_the_ratio_follows_its_ramp(tmp_path, blocking):
    """
    A slow source gets the ramped cap, and lockstep rounds the ramped ``updates_per_step``.

    Free-running: a paced arm, whose next batch comes only once the learner has done what it
    may. Lockstep (sync, single process): at the whole ratio from its first update, sync
    learned nothing on ``gym:PandaPush-v3`` where a learner that trails its workers early
    did (the primacy bias).
    """
    ratio = 2.0 if blocking else 4.0
    cfg = tiny_config(tmp_path, max_updates_ramp_steps=400, rate_limit_slack=0,
                      **{'updates_per_step' if blocking else 'max_updates_per_step': ratio,
                         'sac.hidden_sizes': [8]})
    learner, rng = Learner(cfg, 5, 2), np.random.default_rng(0)
    seen = {}

    def take():  # the next batch only once the learner has done what it may
        if loop.owes_update():
            assert not blocking  # a lockstep loop asks for a round only when it owes none
            return []
        seen[learner.env_steps] = learner.updates
        return [Received(transitions(16, rng), 0)]

    loop = scripted_loop(learner, take, blocking=blocking)
    while learner.env_steps < 800:
        loop.step()
    updates0, steps0 = learner.ready_at
    assert steps0 == 64  # learning_starts
    for steps, updates in seen.items():
        if steps > steps0:
            assert updates - updates0 == pytest.approx(
                updates_allowed(ratio, steps, steps0, 400), abs=1.0)
    assert seen[160] - updates0 < ratio * (160 - steps0) / 3  # a third of the ratio early on
    assert seen[784] - seen[400] == pytest.approx(ratio * 384, abs=1.0)  # the whole one after


def test_rate_limited_workers_and_a_ramped_learner_never_wait_for_each_other(tmp_path):
    slack = 32
    cfg = tiny_config(tmp_path, min_updates_per_step=1.0, max_updates_per_step=4.0,
                      max_updates_ramp_steps=5000, rate_limit_slack=slack,
                      **{'sac.hidden_sizes': [8]})
    learner, rng = Learner(cfg, 5, 2), np.random.default_rng(1)

    def take():  # held to the allowance, as the transports hold workers
        room = learner.env_steps_wanted(slack) - learner.env_steps
        return [Received(transitions(min(16, room), rng), 0)] if room > 0 else []

    loop = scripted_loop(learner, take)
    for _ in range(1500):
        before = (learner.env_steps, learner.updates)
        loop.step()
        assert (learner.env_steps, learner.updates) != before, 'both sides wait'
    assert learner.env_steps > 1000 and learner.updates > 0


def test_lockstep_training_commits_once_a_round(tmp_path):
    """
    No worker acts inside a lockstep round: a commit there would serve nobody.

    The doctor's divergence check would then compare the round's workers with a policy they
    never got, as it compared them with the learner's uncommitted updates before.
    """
    cfg = tiny_config(tmp_path, updates_per_step=2.0, warmup_steps=0,
                      **{'sac.hidden_sizes': [8]})
    learner, rng = Learner(cfg, 5, 2), np.random.default_rng(3)
    rounds, commits = [], []

    def take():
        rounds.append(learner.updates)
        return [Received(transitions(16, rng), 0)]

    def publish(state):
        commits.append(learner.updates)
        return len(commits) - 1

    loop = scripted_loop(learner, take, blocking=True, publish=publish, commit_every=1)
    while learner.env_steps < 400:
        loop.step()
    assert learner.updates > 500
    # The first policy at the first batch (warm-up over), then one commit before each round
    # that follows updates: 32 of them per round at commit_every 1.
    assert commits[1:] == [u for u in rounds if u > 0]
