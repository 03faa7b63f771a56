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
A stop request during the final evaluation cuts it short and still exports a policy.

Scoring the last policy, choosing the export on selection episodes and judging it on held-out
ones take minutes on a cube task; a Ctrl-C (or a ROS node shutting down) then waits one
episode at most, and the run still writes its policy and summary.
"""

import dataclasses
import json

from async_rl_ros.core.learning.artifacts import finish_run
from async_rl_ros.core.learning.evaluation import EpisodeStats, EvaluationStopped, run_episodes
from async_rl_ros.core.learning.learner import Learner
from async_rl_ros.core.learning.loop import TrainingLoop
from async_rl_ros.core.learning.metrics import MetricsLogger
from conftest import tiny_config, transitions
import gymnasium as gym
import numpy as np
import pytest
import torch

OBS, ACT = 5, 2


class CountingEnv(gym.Env):
    """Episodes of three steps; counts its resets."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self):
        self.resets = self.t = 0

    def reset(self, *, seed=None, options=None):
        self.resets += 1
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(2, np.float32), -1.0, False, self.t >= 3, {'is_success': False}


def test_run_episodes_stops_between_episodes_when_asked():
    env = CountingEnv()
    asked = []

    def should_stop():
        asked.append(env.resets)
        return env.resets == 2

    with pytest.raises(EvaluationStopped, match='after 2 of 50 episodes'):
        run_episodes(env, lambda obs: np.zeros(1), 50, seed=0, should_stop=should_stop)
    assert env.resets == 2 and asked == [0, 1, 2]  # asked before every episode, none begun
    assert run_episodes(env, lambda obs: np.zeros(1), 3, seed=0).episodes == 3


def _scored_run(tmp_path):
    """Return a learner and a loop whose evaluator scored versions 1-4 (the last one is 5)."""
    cfg = tiny_config(tmp_path, export_candidates=2, **{'sac.policy_average_tau': 0.0})
    learner = Learner(cfg, OBS, ACT)
    learner.ingest(transitions(200, np.random.default_rng(0)))
    learner.train_step()  # a learner that learned: finish_run judges none that did not
    loop = TrainingLoop(learner, None, None, commit_every=1, logger=MetricsLogger())
    for version, rate in {1: 0.30, 2: 0.55, 3: 0.50, 4: 0.20}.items():
        state = dataclasses.replace(learner.policy_state(), version=version)
        loop.record_evaluation(state, EpisodeStats(episodes=20, successes=round(20 * rate)),
                               env_steps=1000 * version)
    learner.policy_version = 5
    return learner, loop


def _stopping_at(stop_at, calls):
    true_rate = {2: 0.25, 3: 0.60, 5: 0.50}

    def evaluate(state, split):
        if (state.version, split) == stop_at:
            raise EvaluationStopped('stopped after 7 of 100 episodes')
        calls.append((state.version, split))
        rate = 0.10 if split == 'evaluator' else true_rate[state.version]
        return EpisodeStats(episodes=100, successes=round(100 * rate))
    return evaluate


def _exported(run, learner, version):
    obs = torch.ones(4, OBS)
    state = dataclasses.replace(learner.policy_state(), version=version)
    with torch.no_grad():
        torch.testing.assert_close(torch.jit.load(str(run.policy))(obs),
                                   learner.policy_from_state(state)(obs))


def test_a_stop_during_the_selection_exports_the_best_score_so_far(tmp_path):
    learner, loop = _scored_run(tmp_path)
    calls = []
    run = finish_run(loop, tmp_path / 'run', title='test',
                     evaluate=_stopping_at((3, 'selection'), calls))
    assert calls == [(5, 'evaluator'), (2, 'selection')]  # nothing ran after the stop
    summary = json.loads(run.summary_path.read_text())
    assert summary['final_evaluation'] == 'cut short: stopped after 7 of 100 episodes'
    assert summary['exported_policy_version'] == 2  # the evaluator's best, as a shutdown does
    assert summary['last_policy_success_rate'] == 0.1  # that score was complete
    assert 'eval_success_rate' not in summary and 'export_candidates' not in summary
    assert run.evaluation is None and run.checkpoint
    _exported(run, learner, 2)


def test_a_stop_during_the_held_out_episodes_keeps_the_export_the_selection_chose(tmp_path):
    learner, loop = _scored_run(tmp_path)
    calls = []
    run = finish_run(loop, tmp_path / 'run', title='test',
                     evaluate=_stopping_at((3, 'held_out'), calls))
    assert calls == [(5, 'evaluator'), (2, 'selection'), (3, 'selection'), (5, 'selection')]
    summary = json.loads(run.summary_path.read_text())
    assert summary['final_evaluation'].startswith('cut short: ')
    assert summary['exported_policy_version'] == 3  # chosen on the selection episodes
    assert [c['version'] for c in summary['export_candidates']] == [2, 3, 5]
    assert 'eval_success_rate' not in summary  # no held-out judgement to report
    _exported(run, learner, 3)


def test_a_run_that_made_no_update_is_not_evaluated(tmp_path):
    """A run stopped (or failed) before its first update: no minute of episodes to judge it."""
    learner = Learner(tiny_config(tmp_path), OBS, ACT)
    loop = TrainingLoop(learner, None, None, commit_every=1, logger=MetricsLogger())
    calls = []
    run = finish_run(loop, tmp_path / 'run', title='test',
                     evaluate=lambda state, split: calls.append(split))
    summary = json.loads(run.summary_path.read_text())
    assert calls == [] and run.evaluation is None
    assert summary['final_evaluation'] == ('skipped: no update was made (the first waits for '
                                           '64 stored transitions)')
    assert run.policy.is_file() and run.checkpoint  # what there is, is still kept


def test_the_final_evaluation_asks_the_stop_request_of_its_driver(tmp_path):
    from async_rl_ros.core.workers.inline import final_evaluation
    from async_rl_ros.envs.reach_env import make_reach_env

    env = make_reach_env()
    learner = Learner(tiny_config(tmp_path, final_eval_episodes=5),
                      env.observation_space.shape[0], env.action_space.shape[0])
    try:
        stop = []
        evaluate = final_evaluation(env, learner.cfg, should_stop=lambda: len(stop) > 0)
        state = learner.policy_state()
        assert evaluate(state, 'held_out').episodes == 5
        stop.append('SIGINT')
        for split in ('evaluator', 'selection', 'held_out'):
            with pytest.raises(EvaluationStopped, match='after 0 of'):
                evaluate(state, split)
    finally:
        env.close()
