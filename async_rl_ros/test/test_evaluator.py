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

"""The evaluator process: the same seeds for every snapshot, and a learner that never waits."""

from __future__ import annotations

import os
import signal
import time

from async_rl_ros.core.config import EnvWorkerConfig
from async_rl_ros.core.learning.learner import Learner
from async_rl_ros.core.learning.single_process import train_single_process
from async_rl_ros.envs.reach_env import make_reach_env
from async_rl_ros.local.evaluator import EvaluatorProcess
from conftest import tiny_config

HIDDEN = [32, 32]


def tiny_learner(tmp_path, env, **flat) -> Learner:
    cfg = tiny_config(tmp_path, **{'sac.hidden_sizes': HIDDEN, 'batch.initial_batch': 32,
                                   'replay.capacity': 5_000, **flat})
    return Learner(cfg, env.observation_space.shape[0], env.action_space.shape[0])


def scores(evaluator: EvaluatorProcess, deadline_s: float = 180.0) -> list:
    """Poll until the evaluator has scored something (the deadline only guards a hang)."""
    give_up = time.monotonic() + deadline_s
    while time.monotonic() < give_up:
        out = evaluator.poll()
        if out:
            return out
        time.sleep(0.05)
    raise AssertionError('the evaluator scored nothing')


def test_a_snapshot_is_scored_on_the_same_seeds_every_time(tmp_path):
    env = make_reach_env()
    state = tiny_learner(tmp_path, env).policy_state(evaluated=True)
    env.close()
    evaluator = EvaluatorProcess(EnvWorkerConfig(), HIDDEN, episodes=3)
    try:
        assert evaluator.submit(state)
        assert not evaluator.submit(state)  # one snapshot at a time: the next one is skipped
        [(version, first)] = scores(evaluator)
        assert version == state.version and first.episodes == 3 and len(first.returns) == 3
        assert evaluator.submit(state)  # free again once the score came back
        [(_, second)] = scores(evaluator)
        assert second.returns == first.returns  # fixed seeds: the same episodes
        assert second.final_values == first.final_values
    finally:
        evaluator.close()
    assert not evaluator.process.is_alive()


def test_a_frozen_evaluator_never_holds_up_training(tmp_path):
    env = make_reach_env()
    learner = tiny_learner(tmp_path, env, eval_every=200)
    evaluator = EvaluatorProcess(EnvWorkerConfig(), HIDDEN, episodes=2)
    os.kill(evaluator.process.pid, signal.SIGSTOP)  # scores nothing until it is continued
    try:
        loop = train_single_process(learner, env, 800, evaluator=evaluator)
        assert learner.env_steps == 800 and learner.updates > 0
        assert loop.evaluations == []  # nothing came back, and training did not wait for it
        [submitted] = loop._submitted  # the first snapshot; the later ones were skipped
        os.kill(evaluator.process.pid, signal.SIGCONT)
        [(version, stats)] = scores(evaluator)
        assert version == submitted and stats.episodes == 2
    finally:
        os.kill(evaluator.process.pid, signal.SIGCONT)
        evaluator.close()
        env.close()
    assert not evaluator.process.is_alive()
