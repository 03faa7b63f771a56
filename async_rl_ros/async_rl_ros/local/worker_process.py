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
The env-worker process of the local transport: one simulated or physical arm, no ROS.

:func:`worker_main` is the body of each worker process that
:class:`~async_rl_ros.local.runner.LocalTransport` starts. It builds the worker of the
configured task (:func:`~async_rl_ros.envs.factory.build_worker`), sends its transition
batches through its own queue without ever waiting for the learner (in lockstep it waits for
the learner's round instead), and takes the policy from the parameter-server shards' boards.
What it shares with the learner side (:class:`WorkerShared`) is lock-free shared memory and,
in lockstep, a semaphore per worker that only the learner releases: a worker killed mid-write
leaves no lock held.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import queue
import threading
import time
from typing import Any

from async_rl_ros.core.config import EnvWorkerConfig
from async_rl_ros.core.records import PolicyState
from async_rl_ros.core.weights.receiver import Expectation
from async_rl_ros.local.lifecycle import child_entry
from async_rl_ros.local.weight_path import LocalWeightReceiver

__all__ = ['SYNC_POLICY_WAIT_S', 'WorkerShared', 'await_round', 'await_round_policy',
           'worker_main']

_LOG = logging.getLogger(__name__)
SYNC_POLICY_WAIT_S = 60.0   # s a sync worker waits for its round's policy (shards gone)
#: s a lockstep worker sleeps on its bell before it looks at the stop flag again; the bell
#: (rung by the learner when it releases a round) ends the wait at once.
ROUND_WAIT_S = 0.05


@dataclasses.dataclass
class WorkerShared:
    """What the learner side shares with every worker process."""

    stop: Any           # Value: non-zero stops every worker (lock-free: a killed worker
    #                     cannot leave a lock or an Event's condition behind)
    round: Any  # noqa: A003 -- Value: lockstep round counter (sync; one writer)
    round_version: Any  # Value: the policy version the workers of a round act with (sync)
    delivered: Any      # Array: the last round each slot sent its batch for (sync; one
    #                     writer per slot, so a respawned process knows where its slot is)
    bells: list         # Semaphore per worker slot: rung when a round is released (sync)
    produced: Any       # Array: transitions each worker queued (one writer per slot)
    allowance: Any      # Value: transitions all workers may have queued
    beat: Any           # Value: the learner's heartbeat (its update count)
    version: Any        # Value: the learner's policy version
    boards: list        # the weight path's shard boards (names) workers poll
    obs_dim: int
    sync: bool
    cpus: list | None = None  # a physical arm's worker takes these back (the learner is off one)


@child_entry('env worker')  # dies with the learner; SIGINT ignored (stopped via ``stop``)
def worker_main(worker_id: int, env_flat: dict, hidden: tuple[int, ...], batch: int,
                max_batch_lag: int, restarts: int, shared: WorkerShared, out: Any) -> None:
    """Run one env worker until ``shared.stop`` is set (the body of a worker process)."""
    import torch

    from async_rl_ros.core.workers.runtime import WorkerRuntime
    from async_rl_ros.envs.factory import build_worker

    torch.set_num_threads(1)
    if shared.cpus is not None:  # the control thread then takes the arm's CPU
        os.sched_setaffinity(0, shared.cpus)
    built = build_worker(EnvWorkerConfig.from_flat(env_flat), worker_id, hidden, batch,
                         restarts, max_batch_lag=max_batch_lag)
    receiver = LocalWeightReceiver(shared.boards, shared.obs_dim,  # its own policy's layout
                                   Expectation.of_policy(built.worker.policy))
    backend = getattr(built.env.unwrapped, 'backend', None)  # a physical arm reports its own
    # Lockstep: the last round this slot delivered; the process acts only in a later one.
    state = {'round': shared.delivered[worker_id] if shared.sync else 0, 'beat': -1}

    def send(transitions: dict, episodes: list) -> bool:
        stats = {'worker_id': worker_id, 'steps': built.worker.steps,
                 'dropped': runtime.dropped, 'rejected': receiver.rejected,
                 'policy_version': built.worker.policy.version, 'restarts': restarts,
                 'policies': runtime.policies_received, **receiver.stats()}
        if hasattr(backend, 'summary'):  # interrupted steps by kind, unconfirmed stops ...
            stats['arm'] = backend.summary()
        try:
            out.put_nowait((transitions, episodes, stats))
        except queue.Full:
            return False  # never wait for the learner
        shared.produced[worker_id] += len(transitions['reward'])  # this worker's slot only
        if shared.sync:  # lockstep: this was the round's batch; wait for the next round
            shared.delivered[worker_id] = state['round']
            await_next_round()
        return True

    def await_next_round() -> None:
        state['round'] = await_round(shared, worker_id, state['round'])
        await_round_policy(shared, runtime)

    def poll() -> PolicyState | None:
        beat = shared.beat.value
        if beat != state['beat']:  # the learner is alive: heartbeat, pacing
            state['beat'] = beat
            runtime.learner_heard(shared.version.value, sum(shared.produced),
                                  shared.allowance.value)
        return runtime.receive(receiver)

    runtime = WorkerRuntime(built, send, poll, log=_LOG)

    def watch() -> None:
        while not shared.stop.value:
            time.sleep(0.05)
        runtime.stop()

    threading.Thread(target=watch, name='stop', daemon=True).start()
    try:
        if shared.sync:
            # The first batch too waits for its round: one sent before the first release was
            # taken as round 1's, and each round after took the batch of the round before,
            # stepped while the learner updated, with a policy one round old.
            await_next_round()
        runtime.run()
    finally:
        receiver.close()
        built.env.close()


def await_round(shared: WorkerShared, worker_id: int, last: int) -> int:
    """
    Lockstep: sleep until the learner releases a round after ``last``; return its number.

    The round counter is the truth and the worker's bell (a semaphore) only wakes the worker:
    permits left over (rung while this slot's process was dead, or for a round it already
    saw) cost one look at the counter, and a killed worker leaves nothing held. The wait ends
    early when the run stops.
    """
    while shared.round.value <= last and not shared.stop.value:
        shared.bells[worker_id].acquire(timeout=ROUND_WAIT_S)
    return shared.round.value


def await_round_policy(shared: WorkerShared, runtime: Any) -> None:
    """
    Lockstep: install the policy of the round just released before acting on.

    The weights travel through the shard processes, which a busy machine can hold back for
    rounds (a shard process working through a backlog of commits); without this wait a sync
    worker would act with a policy many versions old. The learner keeps the shards alive
    while it waits for the round's batches
    (:meth:`~async_rl_ros.local.runner.LocalTransport.take`), so the policy arrives; only a
    weight path that delivers nothing for :data:`SYNC_POLICY_WAIT_S` lets the worker act on
    with the last policy held, which shows as policy lag.
    """
    wanted = shared.round_version.value
    deadline = time.monotonic() + SYNC_POLICY_WAIT_S
    while (runtime.worker.policy.version < wanted and not shared.stop.value
           and time.monotonic() < deadline):
        policy = runtime.poll_weights()  # what the runtime polls between steps
        if policy is None:
            time.sleep(0.0005)
        elif not runtime.install(policy):
            return  # weights that do not fit: counted by install, the worker acts on
