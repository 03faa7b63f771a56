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

"""The embedded runner: worker processes, both modes, respawn, clean Ctrl-C."""

import contextlib
import os
import queue
import signal
import threading
import time
from types import SimpleNamespace

from async_rl_ros.core.config import ConfigError, EnvWorkerConfig, LearnerConfig, LocalRunnerConfig
from async_rl_ros.core.learning.evaluation import run_episodes
from async_rl_ros.core.learning.learner import Learner
from async_rl_ros.core.learning.metrics import MetricsLogger
from async_rl_ros.envs.reach_env import make_reach_env
from async_rl_ros.local import worker_process
from async_rl_ros.local.runner import LocalTransport
from async_rl_ros.local.train import LocalRun
import numpy as np
import pytest
import torch


def configs(tmp_path, mode: str, steps: int, hidden=(32, 32), learner=None, **runner):
    learner_cfg = LearnerConfig().replace(**{
        'sac.hidden_sizes': list(hidden), 'batch.initial_batch': 64, 'batch.min_batch': 8,
        'learning_starts': 256, 'warmup_steps': 256, 'total_env_steps': steps,
        'replay.capacity': 50_000, 'checkpoint.directory': str(tmp_path / 'ckpt'),
        **(learner or {})})
    runner = LocalRunnerConfig().replace(mode=mode, num_workers=2, transition_batch=32,
                                         **{'parameter_server.commit_every': 4, **runner})
    return EnvWorkerConfig(), learner_cfg, runner


def local_run(env_cfg, learner_cfg, runner_cfg):
    """Return the learner, transport and loop as ``async-rl-train`` wires them (no evaluator)."""
    return LocalRun(env_cfg, learner_cfg, runner_cfg, logger=MetricsLogger(), evaluate=False)


def train_to_the_end(*cfgs):
    run = local_run(*cfgs)
    try:
        run.run()
    finally:
        run.close()
    return run


@contextlib.contextmanager
def in_background(run):
    """Train ``run`` in a thread; on leaving, ask it to stop, join it and end its processes."""
    stop = threading.Event()
    thread = threading.Thread(target=run.run, kwargs={'should_stop': stop.is_set})
    thread.start()
    try:
        yield thread
    finally:
        stop.set()
        thread.join(timeout=60)
        run.close()


def wait_for(condition, deadline: float, poll: float = 0.05) -> None:
    """Poll ``condition()`` until it holds or the monotonic clock passes ``deadline``."""
    while not condition() and time.monotonic() < deadline:
        time.sleep(poll)


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.mark.parametrize('mode', ['async', 'sync'])
def test_both_modes_learn_publish_and_leave_no_process(tmp_path, mode):
    """Both modes learn a little on a tiny budget (nearer the targets than holding still)."""
    # Async as lockstep: 2 updates per transition, workers at most 256 transitions ahead (not
    # 2,000), so both modes learn from about the same number of updates however busy the
    # machine is.
    run = train_to_the_end(*configs(tmp_path, mode, 3000, hidden=(64, 64), learner={
        'rate_limit_slack': 256, 'min_updates_per_step': 2.0}))
    learner, transport = run.learner, run.transport
    assert learner.env_steps >= 3000
    assert learner.updates > 0 and learner.policy_version > 0
    versions = {int(s['policy_version']) for s in transport.worker_stats.values()}
    assert max(versions) >= 1  # workers decoded the published packets and act with them
    metrics = transport.metrics()
    assert metrics['transport/rejected_packets'] == 0
    # The weights reached the workers through the shard processes, deltas among them. A
    # lockstep round spans more commits than a keyframe's interval (``codec.full_every``), so
    # there a worker reads about one keyframe per delta; free-running workers follow every
    # few commits and get mostly deltas.
    summary = transport.summary()
    assert summary['weights_policies_received'] > 0
    assert summary['weights_delta_packets'] > 0
    if mode == 'async':
        assert summary['weights_delta_packets'] > summary['weights_packets'] / 2
    assert summary['weights_reduction'] > 0.3  # a tiny actor early on: keyframes weigh more
    lags = run.loop.lag_percentiles()
    assert lags['charts/transition_lag_p50'] <= lags['charts/transition_lag_max']
    if mode == 'sync':
        assert lags['charts/transition_lag_max'] == 0.0  # lockstep: each round's own policy
    assert run.loop.episodes >= 20  # the workers reported their episodes
    # The trained policy ends at most half as far from the targets as an arm that holds still
    # (what an untrained actor, whose mean action is about zero, does) on the same 10 episodes.
    env = make_reach_env()
    try:
        trained = run_episodes(env, lambda o: learner.act(o, deterministic=True), 10, seed=7)
        still = run_episodes(env, lambda o: np.zeros(env.action_space.shape), 10, seed=7)
    finally:
        env.close()
    assert trained.mean_final < 0.5 * still.mean_final, (trained.final_values,
                                                         still.final_values)
    assert all(not h.process.is_alive() for h in transport.workers.values())


def test_lockstep_workers_act_with_the_round_policy_while_the_shards_lag(tmp_path):
    """A sync round starts only with its policy, even when the shard processes fall behind."""
    run = local_run(*configs(tmp_path, 'sync', 10**9))
    with in_background(run):
        shards = list(run.transport.weights._procs)
        try:
            deadline = time.monotonic() + 300
            wait_for(lambda: run.learner.policy_version >= 2, deadline)
            assert run.learner.policy_version >= 2
            for shard in shards:  # the commits queue up behind the paused shards
                os.kill(shard.pid, signal.SIGSTOP)
            time.sleep(1.0)  # rounds would go on with an old policy here
            for shard in shards:
                os.kill(shard.pid, signal.SIGCONT)
            steps = run.learner.env_steps
            wait_for(lambda: run.learner.env_steps >= steps + 500, deadline)
            assert run.learner.env_steps >= steps + 500
        finally:
            for shard in shards:
                if shard.is_alive():
                    os.kill(shard.pid, signal.SIGCONT)
    assert run.loop.lag_percentiles()['charts/transition_lag_max'] == 0.0


def test_a_lockstep_round_waits_for_a_worker_the_machine_holds_back(tmp_path):
    """
    A worker starved of the CPU delays its round; the round never goes on without it.

    A round used to go on 5 s after the first batch, so on a machine loaded beyond its cores
    a late worker's batch landed in the next round, acted with a policy a whole round old.
    The worker is paused here for longer than that, then resumed.
    """
    run = local_run(*configs(tmp_path, 'sync', 10**9))
    with in_background(run) as thread:
        deadline = time.monotonic() + 300
        wait_for(lambda: run.learner.policy_version >= 2, deadline)
        assert run.learner.policy_version >= 2
        held = run.transport.workers[1].process
        os.kill(held.pid, signal.SIGSTOP)
        try:
            rounds = run.transport.shared.round.value
            time.sleep(7.0)  # longer than the 5 s a round used to wait
            # At most the round under way ends, releasing the next, which waits for the worker.
            assert run.transport.shared.round.value <= rounds + 1
        finally:
            os.kill(held.pid, signal.SIGCONT)
        steps = run.learner.env_steps
        wait_for(lambda: run.learner.env_steps >= steps + 500, deadline)
        assert run.learner.env_steps >= steps + 500
    assert not thread.is_alive()
    assert run.loop.lag_percentiles()['charts/transition_lag_max'] == 0.0
    assert run.transport.metrics()['transport/stalled_rounds'] == 0
    assert run.transport.respawns == 0


class _CountingBell:
    """A worker's bell that counts the waits on it and says when the third one starts."""

    def __init__(self):
        self.permits = threading.Semaphore(0)
        self.waits = 0
        self.third_wait = threading.Event()

    def acquire(self, timeout):
        self.waits += 1
        if self.waits == 3:
            self.third_wait.set()
        return self.permits.acquire(timeout=timeout)

    def release(self):
        self.permits.release()


def test_a_lockstep_worker_sleeps_on_its_bell_and_trusts_only_the_round_counter(monkeypatch):
    """
    A lockstep worker's wait ends on the ring of a new round, not on a clock or a permit.

    Two permits left over from rounds already seen do not release it; the ring of a new round
    does, at once (with the wait's timeout an hour long).
    """
    monkeypatch.setattr(worker_process, 'ROUND_WAIT_S', 3600.0)
    bell = _CountingBell()
    shared = SimpleNamespace(round=SimpleNamespace(value=4), stop=SimpleNamespace(value=0),
                             bells=[None, bell])
    bell.release()
    bell.release()
    got = []
    waiter = threading.Thread(target=lambda: got.append(worker_process.await_round(shared, 1, 4)),
                              daemon=True)
    waiter.start()
    assert bell.third_wait.wait(60.0)
    assert waiter.is_alive() and not got
    shared.round.value = 5  # the learner's order: the counter, then the bell
    bell.release()
    waiter.join(60.0)
    assert got == [5] and bell.waits == 3
    shared.stop.value = 1  # a stop ends a wait too
    worker_process.await_round(shared, 1, 5)


@pytest.mark.parametrize('ratio', [0.25, 1.0])
def test_async_workers_keep_to_the_update_to_data_ratio(tmp_path, ratio):
    """Free-running workers would send 100x what the learner uses; the limit holds them."""
    env_cfg, learner_cfg, runner_cfg = configs(
        tmp_path, 'async', 2500, learner={'rate_limit_slack': 300, 'updates_per_step': 1.0,
                                          'min_updates_per_step': ratio,
                                          'max_updates_per_step': 1.0})
    run = train_to_the_end(env_cfg, learner_cfg, runner_cfg)
    learner = run.learner
    # Owed when the budget ends: per worker a batch checked, then sent, and what waits in
    # its queue and the double buffer (the last batches bring no updates). Free-running
    # workers would be ~100x ahead, far beyond this.
    in_flight = 4 * run.transport.num_workers * runner_cfg.transition_batch
    assert learner.env_steps >= 2500
    starts = 256  # learning_starts: the first update comes after these transitions
    assert learner.updates >= ratio * (learner.env_steps - starts - 300 - in_flight) - 1
    assert learner.updates <= learner_cfg.max_updates_per_step * (learner.env_steps - starts + 1)


def test_a_slow_source_gets_up_to_max_updates_per_step(tmp_path):
    """Data arriving slower than the learner can use it: the learner runs up to its cap."""
    env_cfg, learner_cfg, runner_cfg = configs(
        tmp_path, 'async', 1200, learner={'updates_per_step': 1.0, 'max_updates_per_step': 3.0})
    run = local_run(env_cfg, learner_cfg, runner_cfg.replace(num_workers=1))
    arrived, pending = run.transport.take, []

    def take():  # slower than the learner: the next batch only once it has caught up
        pending.extend(arrived())
        return [pending.pop(0)] if pending and not run.loop.owes_update() else []

    run.transport.take = take
    run.run()
    run.close()
    learner = run.learner
    updates0, steps0 = run.learner.ready_at  # counters when updates could begin
    ratio = (learner.updates - updates0) / (learner.env_steps - steps0 + 1)
    assert 2.5 < ratio <= 3.0 + 1e-9  # well above updates_per_step, never above the cap


def test_rate_limit_slack_zero_lets_workers_run_free(tmp_path):
    run = train_to_the_end(*configs(tmp_path, 'async', 4000, learner={'rate_limit_slack': 0}))
    assert run.transport.shared.allowance.value >= 2**62
    assert run.transport.metrics()['transport/rate_limited'] == 0.0


def test_a_physical_arm_gets_exactly_one_worker(tmp_path):
    _, learner_cfg, runner = configs(tmp_path, 'async', 1000)
    real = EnvWorkerConfig().replace(backend='ur5')
    learner = Learner(learner_cfg, 21, 3)
    with pytest.raises(ConfigError, match='exactly 1 with backend ur5'):
        LocalTransport(real, learner_cfg, runner, learner.policy_state())


def test_more_workers_than_free_memory_holds_are_refused_before_any_starts(
        tmp_path, monkeypatch):
    """A typo of 1000 workers on a laptop: one line, not the kernel's out-of-memory killer."""
    import multiprocessing
    import psutil

    from async_rl_ros.core.workers import machine

    env_cfg, learner_cfg, runner = configs(tmp_path, 'async', 1000)
    learner = Learner(learner_cfg, 21, 3)
    free = 4 * 2**30
    monkeypatch.setattr(psutil, 'virtual_memory', lambda: SimpleNamespace(available=free))
    monkeypatch.setattr(multiprocessing.context.SpawnProcess, 'start',
                        lambda self: pytest.fail('a process started'))
    fit = free // machine.CHILD_MEMORY_BYTES - runner.parameter_server.num_shards - 1
    with pytest.raises(ConfigError, match=rf'^local_runner\.num_workers = {fit + 1} is not '
                       rf'allowed \(<= {fit} on this machine: a worker process takes about '
                       r'250 MB and 4\.0 GB of memory are free for them and 3 other '
                       r'processes\)$'):
        LocalTransport(env_cfg, learner_cfg, runner.replace(num_workers=fit + 1),
                       learner.policy_state())
    # As many as fit: fine.
    machine.check_memory(fit, runner.parameter_server.num_shards + 1, 'num_workers', fit)


def test_with_a_physical_arm_the_learner_and_its_processes_keep_off_the_arm_cpu(
        tmp_path, monkeypatch):
    """On 8 CPUs the learner, shards and evaluator keep 0-6; the worker gets all 8 back."""
    from async_rl_ros.core.workers import realtime
    pinned = []
    monkeypatch.setattr(realtime, '_cpus', lambda: list(range(8)))
    monkeypatch.setattr(os, 'sched_setaffinity', lambda pid, cpus: pinned.append(set(cpus)))
    _, learner_cfg, runner = configs(tmp_path, 'async', 1000)
    runner = runner.replace(num_workers=1)
    learner = Learner(learner_cfg, 21, 3)
    real = LocalTransport(EnvWorkerConfig().replace(backend='ur5'), learner_cfg, runner,
                          learner.policy_state())
    try:
        assert pinned == [set(range(7))]  # before the shard processes started
        assert real.shared.cpus == list(range(8))  # what the arm's worker takes back
    finally:
        real.shutdown()
    simulated = LocalTransport(EnvWorkerConfig(), learner_cfg, runner, learner.policy_state())
    try:
        assert pinned == [set(range(7))] and simulated.shared.cpus is None  # nothing pinned
    finally:
        simulated.shutdown()


def test_a_killed_worker_is_respawned_and_acts_with_the_policy_at_once(tmp_path):
    run = local_run(*configs(tmp_path, 'async', 10**9))
    transport = run.transport
    with in_background(run) as thread:
        deadline = time.monotonic() + 120
        wait_for(lambda: run.learner.policy_version >= 2, deadline, poll=0.1)
        victim = transport.workers[0].process
        victim.kill()
        wait_for(lambda: transport.respawns > 0, time.monotonic() + 120)
        assert transport.respawns == 1
        assert transport.workers[0].process.pid != victim.pid
        steps = run.learner.env_steps
        wait_for(lambda: run.learner.env_steps >= steps + 500, deadline, poll=0.1)
        assert run.learner.env_steps >= steps + 500
        # The respawned worker acts with a policy, not with a warm-up of its own.
        wait_for(lambda: transport.worker_stats.get(0, {}).get('restarts') == 1, deadline,
                 poll=0.1)
        stats = transport.worker_stats[0]
        assert stats['restarts'] == 1 and stats['policy_version'] >= 1
        # It joined in the middle of the deltas: it took the keyframe it lacked, then deltas.
        assert stats['weights/full_packets'] >= 1 and stats['policies'] >= 1
    assert not thread.is_alive()
    assert all(not h.process.is_alive() for h in transport.workers.values())


def test_a_worker_killed_while_writing_does_not_stall_the_others(tmp_path):
    """A worker SIGKILLed inside a queue write leaves that queue's lock held: only its own."""
    run = local_run(*configs(tmp_path, 'async', 10**9))
    with in_background(run) as thread:
        deadline = time.monotonic() + 120
        wait_for(lambda: run.learner.env_steps >= 300, deadline, poll=0.1)
        run.transport.queues[0]._wlock.acquire()  # what the killed writer leaves behind
        steps = run.learner.env_steps
        wait_for(lambda: run.learner.env_steps >= steps + 500, deadline, poll=0.1)
        assert run.learner.env_steps >= steps + 500  # worker 1's batches still arrive
    assert not thread.is_alive()


@pytest.mark.parametrize('mode', ['single', 'sync', 'async'])
def test_a_resumed_run_continues_without_its_replay_buffer(tmp_path, mode):
    """The replay buffer is not saved by default: the workers refill it, training goes on."""
    env_cfg, learner_cfg, runner_cfg = configs(tmp_path, mode, 600)
    first = train_to_the_end(env_cfg, learner_cfg, runner_cfg)
    first.learner.save_checkpoint()
    updates, version = first.learner.updates, first.learner.policy_version
    assert updates > 0 and version > 1 and not learner_cfg.checkpoint.save_replay_buffer
    second = LocalRun(env_cfg, learner_cfg.replace(total_env_steps=1400), runner_cfg,
                      logger=MetricsLogger(), evaluate=False, resume=True)
    assert second.resumed is not None and second.resumed.path is not None
    assert second.learner.env_steps >= 600 and len(second.learner.replay) == 0
    published = []
    publish = second.loop.sink.publish
    second.loop.sink.publish = lambda state: published.append(publish(state)) or published[-1]
    try:
        second.run()
    finally:
        second.close()
    assert second.learner.env_steps >= 1400
    assert second.learner.updates > updates  # it trained again after the refill
    # The versions go on from the checkpoint's: the workers, the evaluator's record and the
    # exported policy never see one number for two policies of a run.
    assert [v for v in published if v is not None][0] == version + 1


def test_the_loop_checks_the_policies_workers_act_with(tmp_path):
    """The doctor's policy-similarity check runs on the run path, with the workers' versions."""
    # A small slack keeps the workers near the learner, so that on a loaded machine they do not
    # take all 1,500 steps before the first policy reaches them.
    run = train_to_the_end(*configs(tmp_path, 'async', 1500, learner={'rate_limit_slack': 128}))
    assert set(run.loop.worker_versions) == {0, 1}
    assert run.loop.cosines and all(-1.0 <= c <= 1.0 for c in run.loop.cosines.values())


def test_the_summary_says_why_a_physical_arm_cut_episodes_short(tmp_path):
    env_cfg, learner_cfg, runner_cfg = configs(tmp_path, 'async', 1000)
    transport = LocalTransport(env_cfg, learner_cfg, runner_cfg.replace(num_workers=1),
                               Learner(learner_cfg, 21, 3).policy_state())
    try:
        base = {'worker_id': 0, 'steps': 10, 'dropped': 0, 'rejected': 0, 'policies': 0,
                'policy_version': -1, 'restarts': 0, 'weights/bytes_received': 0,
                'weights/full_packets': 0, 'weights/delta_packets': 0, 'weights/resyncs': 0}
        transport.worker_stats[0] = dict(base, arm={
            'interruptions': {'stale data': 3, 'lost link': 1}, 'stop_failures': 0,
            'reconnects': 1, 'client_losses': 1})
        summary = transport.summary()
    finally:
        transport.shutdown()
    assert summary['arm_interruptions'] == {'stale data': 3, 'lost link': 1}
    assert summary['arm_reconnects'] == 1 and summary['arm_stop_failures'] == 0


def test_a_lockstep_worker_steps_only_in_rounds_its_slot_has_not_delivered(tmp_path):
    """
    A sync worker acts only in a released round, and a respawn only in one its slot owes.

    A worker process that started before the learner's first round used to send a batch at
    once, which the first round took; from then on every round took the batch of the round
    before. The body of a worker process runs in a thread here, on a reach env with no shards.
    """
    def value(v):
        return SimpleNamespace(value=v)

    bell = _CountingBell()
    shared = SimpleNamespace(
        stop=value(0), round=value(0), round_version=value(-1), delivered=[0], bells=[bell],
        produced=[0], allowance=value(-1), beat=value(0), version=value(-1), boards=[],
        obs_dim=None, sync=True, cpus=None)
    out = queue.Queue()

    def worker():
        worker_process.worker_main.__wrapped__(0, EnvWorkerConfig().to_flat(), (8,), 16, 0, 0,
                                               shared, out)

    threads = [threading.Thread(target=worker, daemon=True)]
    threads[0].start()
    try:
        assert bell.third_wait.wait(120.0)  # waiting for round 1 (a wait takes 0.05 s)
        assert out.empty() and shared.produced == [0]  # not one step before it
        shared.round.value = 1
        bell.release()
        out.get(timeout=120.0)  # round 1's batch, then it waits for round 2
        wait_for(lambda: shared.delivered == [1], time.monotonic() + 120.0)
        assert shared.delivered == [1] and out.empty()
        # A process respawned after its slot delivered round 1 waits for round 2 too.
        bell.waits, bell.third_wait = 0, threading.Event()
        threads.append(threading.Thread(target=worker, daemon=True))
        threads[1].start()
        assert bell.third_wait.wait(120.0)
        assert out.empty() and shared.produced == [16]
    finally:
        shared.stop.value = 1
        for thread in threads:
            thread.join(60.0)
    assert not any(thread.is_alive() for thread in threads)
