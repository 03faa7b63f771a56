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

"""The env worker: batching, version stamps, weights hand-over, learner round trip."""

import dataclasses
import threading

from async_rl_ros.core.config import LearnerConfig
from async_rl_ros.core.learning.learner import Learner
from async_rl_ros.core.workers.env_worker import (EnvWorker, NO_POLICY, WorkerPacer,
                                                  WorkerPolicy)
from async_rl_ros.core.workers.runtime import BuiltWorker, WorkerRuntime
from async_rl_ros.envs.reach_env import make_reach_env
from conftest import scripted_loop, tiny_config, transitions
import numpy as np
import pytest

HIDDEN = (32, 32)


@pytest.fixture(scope='module')
def env():
    e = make_reach_env()
    yield e
    e.close()


def test_batches_are_stamped_and_full(env):
    worker = EnvWorker(3, env, WorkerPolicy(21, 3, HIDDEN), batch_size=16, seed=1)
    batches = [b for b in (worker.step() for _ in range(40)) if b is not None]
    assert len(batches) == 2
    for b in batches:
        assert b['obs'].shape == (16, 21) and b['action'].shape == (16, 3)
        assert np.all(b['worker_id'] == 3)
        assert np.all(b['policy_version'] == NO_POLICY)  # no weights yet: random actions
        assert np.all(b['source'] == 0)  # 'sim'
    # Consecutive transitions chain (no episode ends within the first 40 steps).
    b = batches[0]
    np.testing.assert_allclose(b['next_obs'][:-1], b['obs'][1:])


def test_the_first_episode_starts_with_the_first_step_not_where_the_worker_is_built(env):
    """A node builds workers in *configure*: a real arm's reset must not run (nor wait) there."""
    resets = []
    reset = env.reset
    env.reset = lambda **kw: (resets.append(kw), reset(**kw))[1]
    try:
        worker = EnvWorker(0, env, WorkerPolicy(21, 3, HIDDEN), batch_size=4, seed=7)
        assert resets == []
        worker.step()
        assert resets == [{'seed': 7}]
    finally:
        del env.reset


def test_a_real_worker_tags_its_transitions_and_the_learner_stores_the_tag(env, tmp_path):
    worker = EnvWorker(1, env, WorkerPolicy(21, 3, HIDDEN), batch_size=8, source='real')
    batch = next(b for b in iter(worker.step, 'never') if b is not None)
    assert batch['source'].dtype == np.int8 and np.all(batch['source'] == 1)
    cfg = LearnerConfig().replace(**{'sac.hidden_sizes': list(HIDDEN),
                                     'checkpoint.directory': str(tmp_path)})
    learner = Learner(cfg, 21, 3)
    assert learner.ingest(batch) == 8
    assert np.all(learner.replay.storage.source[:8] == 1)
    with pytest.raises(ValueError, match='source'):
        EnvWorker(1, env, WorkerPolicy(21, 3, HIDDEN), source='robot')


def test_weights_from_a_learner_are_used_and_stamped(env, tmp_path):
    cfg = LearnerConfig().replace(**{'sac.hidden_sizes': list(HIDDEN),
                                     'checkpoint.directory': str(tmp_path)})
    learner = Learner(cfg, 21, 3)
    worker = EnvWorker(0, env, WorkerPolicy(21, 3, HIDDEN, seed=0), batch_size=8, seed=2)
    learner.policy_version = 5
    assert worker.load_policy(learner.policy_state())
    assert not worker.load_policy(learner.policy_state())  # same version: ignored
    batch = next(b for b in iter(worker.step, 'never') if b is not None)
    assert np.all(batch['policy_version'] == 5)
    # The worker's deterministic action equals the learner's for the same observation.
    obs = batch['obs'][0]
    np.testing.assert_allclose(worker.policy.act(obs, deterministic=True),
                               learner.act(obs, deterministic=True), atol=1e-5)
    assert learner.ingest(batch) == 8


def test_random_actions_until_the_first_policy_then_the_policy_at_once(env, tmp_path):
    cfg = LearnerConfig().replace(**{'sac.hidden_sizes': list(HIDDEN),
                                     'checkpoint.directory': str(tmp_path)})
    state = Learner(cfg, 21, 3).policy_state()
    worker = EnvWorker(0, env, WorkerPolicy(21, 3, HIDDEN), batch_size=10)
    first = next(b for b in iter(worker.step, 'never') if b is not None)
    worker.load_policy(dataclasses.replace(state, version=1))
    second = next(b for b in iter(worker.step, 'never') if b is not None)
    assert np.all(first['policy_version'] == NO_POLICY)
    assert np.all(second['policy_version'] == 1)  # no warm-up of its own (a respawn)


def test_a_restarted_learner_is_followed_whatever_its_version(env, tmp_path):
    """Versions are ordered within one learner run; a new run counts again from its start."""
    cfg = LearnerConfig().replace(**{'sac.hidden_sizes': list(HIDDEN),
                                     'checkpoint.directory': str(tmp_path)})
    state = Learner(cfg, 21, 3).policy_state()
    worker = EnvWorker(0, env, WorkerPolicy(21, 3, HIDDEN), batch_size=10)
    assert worker.load_policy(dataclasses.replace(state, version=50, run_id=7))
    assert not worker.load_policy(dataclasses.replace(state, version=3, run_id=7))  # older
    assert worker.load_policy(dataclasses.replace(state, version=3, run_id=9))  # restarted
    assert (worker.policy.version, worker.policy.run_id) == (3, 9)


def _learner_state(tmp_path):
    cfg = LearnerConfig().replace(**{'sac.hidden_sizes': list(HIDDEN),
                                     'checkpoint.directory': str(tmp_path)})
    return Learner(cfg, 21, 3).policy_state()


@pytest.mark.parametrize('max_lag', [0, 4])
def test_a_batch_goes_out_early_once_the_policy_moved_past_it(env, tmp_path, max_lag):
    """A learner publishing faster than a worker fills its batch: batching adds <= max_lag."""
    state = _learner_state(tmp_path)
    worker = EnvWorker(0, env, WorkerPolicy(21, 3, HIDDEN), batch_size=16, seed=3,
                       max_batch_lag=max_lag)
    sent = []
    for step in range(200):
        worker.load_policy(dataclasses.replace(state, version=step + 1))  # one per step
        batch = worker.step()
        if batch is not None:
            sent.append((worker.policy.version, batch))
    sizes = [len(b['reward']) for _, b in sent]
    if max_lag == 0:
        assert sizes == [16] * 12  # full batches only, however old their first transition
        return
    # The first transition of each batch is max_lag versions old when the batch goes out,
    # and no transition is lost, repeated or reordered on the way.
    assert all(version - b['policy_version'][0] == max_lag for version, b in sent)
    assert sizes == [max_lag + 1] * (200 // (max_lag + 1))
    versions = np.concatenate([b['policy_version'] for _, b in sent])
    np.testing.assert_array_equal(versions, np.arange(1, len(versions) + 1))
    obs = np.concatenate([b['obs'] for _, b in sent])
    next_obs = np.concatenate([b['next_obs'] for _, b in sent])
    chained = ~np.concatenate([b['terminated'] | b['truncated'] for _, b in sent])[:-1]
    np.testing.assert_allclose(next_obs[:-1][chained], obs[1:][chained])


def test_a_held_batch_goes_out_once_while_the_worker_does_not_step(env, tmp_path):
    state = _learner_state(tmp_path)
    worker = EnvWorker(0, env, WorkerPolicy(21, 3, HIDDEN), batch_size=64, max_batch_lag=4)
    worker.load_policy(dataclasses.replace(state, version=1))
    assert all(worker.step() is None for _ in range(10))
    worker.load_policy(dataclasses.replace(state, version=4))
    assert worker.flush_stale() is None  # 3 versions: not yet
    worker.load_policy(dataclasses.replace(state, version=5))
    held = worker.flush_stale()
    assert len(held['reward']) == 10 and np.all(held['policy_version'] == 1)
    worker.load_policy(dataclasses.replace(state, version=50))
    assert worker.flush_stale() is None  # sent once: nothing held any more


def test_a_worker_the_rate_limit_holds_back_sends_its_stale_transitions(env, tmp_path):
    """The runtime's pause: the held transitions go out once, then the worker only waits."""
    state = _learner_state(tmp_path)
    worker = EnvWorker(0, env, WorkerPolicy(21, 3, HIDDEN), batch_size=64, max_batch_lag=8)
    built = BuiltWorker(worker, env, None, 'sim', 0)
    sent, idle = [], threading.Event()
    polls = {'since_v9': 0}

    def poll():
        if worker.policy.version < 1:
            return dataclasses.replace(state, version=1)
        if worker.steps >= 10 and worker.policy.version < 9:  # the learner moves on
            return dataclasses.replace(state, version=9)
        if worker.policy.version == 9:
            polls['since_v9'] += 1
            if polls['since_v9'] >= 50:  # 50 pauses with the held transitions 8 versions old
                idle.set()
        return None

    def send(batch, episodes):
        sent.append(batch)
        return True

    runtime = WorkerRuntime(built, send, poll)
    runtime.learner_heard(0, received=0, wanted=10)  # the learner can use 10 transitions
    thread = threading.Thread(target=runtime.run, daemon=True)
    thread.start()
    try:
        assert idle.wait(timeout=300)
    finally:
        runtime.stop()
        thread.join(timeout=60)
    assert worker.steps == 10  # paused at the limit all along
    assert len(sent) == 1 and len(sent[0]['reward']) == 10
    assert np.all(sent[0]['policy_version'] == 1) and runtime.batches_sent == 1


def test_pacer_pauses_only_while_ahead_of_the_learner():
    pacer = WorkerPacer()
    assert not pacer.should_pause(10**6)  # nothing heard from a learner: never pause
    pacer.report(received=1000, wanted=1500, own_steps=200)
    assert not pacer.should_pause(699)    # 1000 + 499 < 1500
    assert pacer.should_pause(700)        # the worker's own steps since the report count
    pacer.report(received=1600, wanted=3000, own_steps=700)  # the learner caught up
    assert not pacer.should_pause(700)
    pacer.report(received=10**6, wanted=-1, own_steps=700)   # -1: no limit
    assert not pacer.should_pause(10**7)


def test_learner_wants_learning_starts_then_transitions_at_min_updates_per_step(tmp_path):
    # The limit follows the free-running floor, not the lockstep ratio (updates_per_step 2).
    cfg = LearnerConfig().replace(**{
        'learning_starts': 500, 'batch.initial_batch': 64, 'min_updates_per_step': 0.5,
        'checkpoint.directory': str(tmp_path)})
    assert cfg.updates_per_step == 2.0
    learner = Learner(cfg, 21, 3)
    assert learner.env_steps_wanted(slack=100) == 600
    learner.ingest(transitions(300, np.random.default_rng(0), obs_dim=21, act_dim=3))
    assert learner.env_steps_wanted(slack=100) == 600  # the 200 the replay still lacks
    learner.ingest(transitions(200, np.random.default_rng(1), obs_dim=21, act_dim=3))
    assert learner.ready() and learner.ready_at == (0, 500)
    learner.updates = 50
    assert learner.env_steps_wanted(slack=100) == 500 + 100 + 100  # 2 transitions per update


def test_a_resumed_learner_without_its_replay_wants_the_refill(tmp_path):
    # Resumed from a checkpoint without the replay buffer: counters say 11,456 transitions, the
    # replay is empty. The workers must be allowed the 500 it needs before updates can start.
    cfg = LearnerConfig().replace(**{
        'learning_starts': 500, 'batch.initial_batch': 64, 'min_updates_per_step': 0.5,
        'checkpoint.directory': str(tmp_path)})
    learner = Learner(cfg, 21, 3)
    learner.env_steps, learner.updates = 11_456, 100
    assert not learner.ready()
    assert learner.env_steps_wanted(slack=0) == 11_456 + 500


def test_a_resumed_learner_and_its_workers_never_wait_for_each_other(tmp_path):
    """
    Resumed without its replay where the workers had used up their slack: no idle step.

    Counted from the run's first step, the rate limit wanted nothing beyond the refill, and
    the loop's cap allowed a few updates per transition after it: a run resumed a few
    thousand steps short of its budget sat idle for good.
    """
    from async_rl_ros.core.learning.loop import Received

    slack = 64
    cfg = tiny_config(tmp_path, learning_starts=500, min_updates_per_step=1.0,
                      max_updates_per_step=4.0, rate_limit_slack=slack)
    learner = Learner(cfg, 5, 2)
    learner.updates = 4000
    learner.env_steps = resumed_at = 500 + 4000 + slack  # the allowance, used up
    rng = np.random.default_rng(5)

    def take():  # free-running workers, held to the allowance as the transports hold them
        room = learner.env_steps_wanted(slack) - learner.env_steps
        return [Received(transitions(min(32, room), rng), 0)] if room > 0 else []

    loop = scripted_loop(learner, take)
    for _ in range(200):
        before = (learner.env_steps, learner.updates)
        loop.step()
        assert (learner.env_steps, learner.updates) != before, 'both sides wait'
    assert learner.ready_at[0] == 4000 and learner.ready_at[1] >= resumed_at + 500
    assert learner.env_steps > learner.ready_at[1] + slack  # the workers went on after it
