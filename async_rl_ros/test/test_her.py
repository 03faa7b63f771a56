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

"""Tests of hindsight relabeling: the relabeler, the reach task's goal spec, the learner."""

from __future__ import annotations

import dataclasses
import pickle
from types import SimpleNamespace

from async_rl_ros.core.config import ConfigError, HindsightConfig, LearnerConfig
from async_rl_ros.core.learning.her import HindsightRelabeler
from async_rl_ros.core.learning.learner import Learner
from async_rl_ros.core.tasks import GoalSpec
from async_rl_ros.envs.reach_env import make_reach_env
from async_rl_ros.envs.reach_task import OBS_SLICES, ReachGoalSpec, ReachTask
from async_rl_ros.envs.scripted import ScriptedReachPolicy
import numpy as np
import pytest

POS, TARGET, DELTA = OBS_SLICES['ee_pos'], OBS_SLICES['target'], OBS_SLICES['to_target']


def rollout(env, policy, seed: int, worker: int = 0, version: int = 3) -> dict:
    """Run one episode; return its transitions as a batch (worker/version as given)."""
    obs, _ = env.reset(seed=seed)
    rows: dict[str, list] = {k: [] for k in ('obs', 'action', 'reward', 'next_obs',
                                             'terminated', 'truncated')}
    done = False
    while not done:
        action = policy(obs)
        next_obs, reward, terminated, truncated, _ = env.step(action)
        for key, value in zip(rows, (obs, action, reward, next_obs, terminated, truncated)):
            rows[key].append(value)
        obs, done = next_obs, terminated or truncated
    batch = {k: np.asarray(v) for k, v in rows.items()}
    batch['reward'] = batch['reward'].astype(np.float32)
    n = len(batch['obs'])
    batch.update(policy_version=np.full(n, version), worker_id=np.full(n, worker),
                 source=np.full(n, 1, dtype=np.int8))
    return batch


@pytest.fixture(scope='module')
def episode():
    """Return the transitions of a scripted rollout that reaches its target, and the config."""
    env = make_reach_env()
    slow = ScriptedReachPolicy(ee_speed=env.cfg.task.ee_speed, gain=1.5)
    batch = rollout(env, slow, seed=3)
    env.close()
    return batch, env.cfg


def relabeler(k=4, strategy='future', spec=None, seed=0, cfg=None):
    spec = spec if spec is not None else ReachGoalSpec((cfg or make_reach_env().cfg).task)
    return HindsightRelabeler(HindsightConfig(k=k, strategy=strategy), spec,
                              np.random.default_rng(seed))


def test_relabeled_rewards_are_the_task_reward_for_the_new_goal(episode):
    batch, cfg = episode
    her = relabeler(k=4, cfg=cfg)
    out = her.add(batch)
    n = len(batch['obs'])
    assert n == cfg.task.max_episode_steps and len(out['obs']) == 4 * n
    task = ReachTask(cfg.task)
    goal = out['next_obs'][:, TARGET]
    for row in range(len(out['obs'])):
        state = SimpleNamespace(ee_pos=out['next_obs'][row, POS].astype(np.float64))
        expected = task.reward(task.distance(state, goal[row].astype(np.float64)),
                               out['action'][row])
        assert out['reward'][row] == np.float32(expected)  # exactly
    # With its own target the spec gives the env's reward (the env uses float64 positions).
    spec = ReachGoalSpec(cfg.task)
    same = spec.compute_reward(spec.achieved(batch['next_obs']), batch['obs'][:, TARGET],
                               {'action': batch['action']})
    np.testing.assert_allclose(same, batch['reward'], atol=1e-5)
    assert batch['reward'].std() > 0.01


def test_relabeled_goals_are_achieved_later_and_written_consistently(episode):
    batch, cfg = episode
    n = len(batch['obs'])
    out = relabeler(k=3, cfg=cfg).add(batch)
    achieved = batch['next_obs'][:, POS]
    t = np.tile(np.arange(n), 3)
    goals = out['obs'][:, TARGET]
    later = [np.flatnonzero((achieved == g).all(axis=1)) for g in goals]
    assert all(len(j) and j.max() >= step for j, step in zip(later, t))
    assert len({tuple(g) for g in goals}) > n // 2  # goals vary, not only the final one
    for key in ('obs', 'next_obs'):
        np.testing.assert_array_equal(out[key][:, TARGET], goals)
        np.testing.assert_allclose(out[key][:, DELTA], goals - out[key][:, POS], atol=1e-6)
        kept = np.r_[0:15]  # joints, velocities and flange position are untouched
        np.testing.assert_array_equal(out[key][:, kept], batch[key][t][:, kept])
    for key in ('action', 'truncated', 'policy_version', 'worker_id', 'source'):
        np.testing.assert_array_equal(out[key], batch[key][t])


def test_success_reward_shows_up(episode):
    batch, cfg = episode
    out = relabeler(k=4, cfg=cfg).add(batch)
    spec = ReachGoalSpec(cfg.task)
    success = spec.is_success(spec.achieved(out['next_obs']), out['next_obs'][:, TARGET])
    assert success.mean() > 0.2  # far more than the original episode's share of goals
    top = cfg.task.shaping_weight * 0.5
    assert out['reward'][success].max() > top - 0.01 * cfg.task.distance_weight
    assert (out['reward'] <= top + 1e-6).all()


def test_final_strategy_uses_the_last_achieved_position(episode):
    batch, cfg = episode
    out = relabeler(k=2, strategy='final', cfg=cfg).add(batch)
    final = np.broadcast_to(batch['next_obs'][-1, POS], (len(out['obs']), 3))
    np.testing.assert_array_equal(out['obs'][:, TARGET], final)


def test_terminate_on_success_relabels_terminated(episode):
    batch, cfg = episode
    task = dataclasses.replace(cfg.task, terminate_on_success=True)
    out = relabeler(k=4, spec=ReachGoalSpec(task)).add(batch)
    spec = ReachGoalSpec(task)
    reached = spec.achieved(out['next_obs'])
    np.testing.assert_array_equal(out['terminated'],
                                  spec.is_success(reached, out['next_obs'][:, TARGET]))
    assert out['terminated'].any()
    plain = relabeler(k=4, cfg=cfg).add(batch)
    assert not plain['terminated'].any()  # time-limit truncation is no termination


class LineSpec:
    """A one-dimensional toy: obs = [position, goal], reward = -|goal - next position|."""

    terminate_on_success = False

    def achieved(self, obs):
        return obs[:, :1]

    def desired(self, obs):
        return obs[:, 1:2]

    def with_goal(self, obs, goal):
        out = np.array(obs)
        out[:, 1:2] = goal
        return out

    def compute_reward(self, achieved, desired, info):
        return -np.abs(desired[:, 0] - achieved[:, 0])

    def is_success(self, achieved, desired):
        return np.abs(desired[:, 0] - achieved[:, 0]) < 0.5


def line_episode(start: float, length: int, worker: int) -> dict:
    pos = start + np.arange(length + 1, dtype=np.float32)
    obs = np.stack([pos[:-1], np.full(length, 99.0, np.float32)], axis=1)
    nxt = np.stack([pos[1:], np.full(length, 99.0, np.float32)], axis=1)
    done = np.zeros(length, bool)
    done[-1] = True
    return {'obs': obs, 'action': np.zeros((length, 1), np.float32),
            'reward': np.zeros(length, np.float32), 'next_obs': nxt,
            'terminated': np.zeros(length, bool), 'truncated': done,
            'policy_version': np.arange(length), 'worker_id': np.full(length, worker)}


def cut(batch: dict, rows) -> dict:
    return {k: v[rows] for k, v in batch.items()}


def test_interleaved_workers_and_split_batches_relabel_whole_episodes():
    assert isinstance(LineSpec(), GoalSpec)
    her = relabeler(k=2, spec=LineSpec())
    a, b = line_episode(0.0, 10, worker=1), line_episode(100.0, 6, worker=2)
    mixed = {k: np.concatenate([a[k][:4], b[k][:3]]) for k in a}
    assert her.add(mixed) is None
    assert her.pending(1) == 4 and her.pending(2) == 3
    out = her.add({k: np.concatenate([b[k][3:], a[k][4:7]]) for k in a})
    assert len(out['obs']) == 2 * 6 and (out['worker_id'] == 2).all()
    assert her.pending(2) == 0 and her.pending(1) == 7
    out = her.add(cut(a, slice(7, 10)))
    assert len(out['obs']) == 2 * 10 and (out['worker_id'] == 1).all()
    # Every goal is a position the episode reached at this step or later.
    assert (out['obs'][:, 1] >= out['next_obs'][:, 0]).all() and (out['obs'][:, 1] <= 10).all()
    np.testing.assert_array_equal(out['reward'], -(out['obs'][:, 1] - out['next_obs'][:, 0]))
    assert her.episodes == 2 and her.relabeled == 32


def test_a_gap_in_a_worker_stream_closes_the_episode():
    her = relabeler(k=1, spec=LineSpec())
    a = line_episode(0.0, 10, worker=0)
    assert her.add(cut(a, slice(0, 4))) is None
    out = her.add(cut(a, slice(6, 10)))  # steps 4 and 5 were lost
    assert len(out['obs']) == 4 + 4  # the first part, then the rest at its end
    assert (out['obs'][:4, 1] <= 4).all() and (out['obs'][4:, 1] >= 7).all()
    inside = {k: np.concatenate([a[k][:3], a[k][5:]]) for k in a}  # a gap inside one batch
    out = relabeler(k=1, spec=LineSpec()).add(inside)
    assert len(out['obs']) == 8 and (out['obs'][:3, 1] <= 3).all()


def test_zero_copies_and_bad_specs():
    her = relabeler(k=0, spec=LineSpec())
    assert her.add(line_episode(0.0, 5, worker=0)) is None
    with pytest.raises(TypeError, match='GoalSpec'):
        relabeler(spec=object())
    with pytest.raises(ConfigError, match='her.strategy'):
        LearnerConfig().replace(**{'her.strategy': 'random'})


def test_reach_goal_spec_is_picklable(episode):
    batch, cfg = episode
    spec = ReachGoalSpec(dataclasses.replace(cfg.task, action_penalty=0.1))
    clone = pickle.loads(pickle.dumps(spec))
    goal, reached = batch['next_obs'][::-1, POS], spec.achieved(batch['next_obs'])
    info = {'action': batch['action']}
    np.testing.assert_array_equal(clone.compute_reward(reached, goal, info),
                                  spec.compute_reward(reached, goal, info))
    with pytest.raises(ValueError, match='action'):  # the penalty cannot be guessed
        spec.compute_reward(reached, goal, {})


def test_learner_stores_copies_without_counting_env_steps(episode, tmp_path):
    batch, cfg = episode
    flat = {'sac.hidden_sizes': [32, 32], 'batch.initial_batch': 64, 'replay.capacity': 5000,
            'learning_starts': 64, 'her.k': 3,
            'checkpoint.directory': str(tmp_path / 'ckpt')}
    learner = Learner(LearnerConfig().replace(**flat), 21, 3, goal_spec=ReachGoalSpec(cfg.task))
    n = len(batch['obs'])
    assert learner.ingest(cut(batch, slice(0, 60))) == 60
    assert len(learner.replay) == 60
    assert learner.ingest(cut(batch, slice(60, n))) == n - 60
    assert learner.env_steps == n and len(learner.replay) == 4 * n
    assert learner.metrics()['her/relabeled'] == 3 * n
    stored = learner.replay.storage.get(np.arange(n, 4 * n))
    np.testing.assert_array_equal(stored['policy_version'], 3)
    np.testing.assert_array_equal(stored['source'], 1)
    # New items, relabeled or not, enter with the same (maximum) priority.
    sampler = learner.replay.sampler
    priorities = sampler.priority(np.arange(4 * n))
    np.testing.assert_array_equal(priorities, priorities[0])
    learner.train_step()
    off = Learner(LearnerConfig().replace(**{**flat, 'her.k': 0}), 21, 3,
                  goal_spec=ReachGoalSpec(cfg.task))
    off.ingest(batch)
    assert off.relabeler is None and len(off.replay) == n
    plain = Learner(LearnerConfig().replace(**flat), 21, 3)  # no goal spec: no relabeling
    plain.ingest(batch)
    assert len(plain.replay) == n
