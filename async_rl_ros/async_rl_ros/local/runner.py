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
The local transport: env-worker processes on this machine, no ROS.

:class:`LocalTransport` is both ports of the
:class:`~async_rl_ros.core.learning.loop.TrainingLoop` for worker processes::

    worker processes (WorkerRuntime) --a queue each--> reader thread --> DoubleBuffer
      --take()--> the loop; publish(state) --> the weight path (shared memory) --> workers

Modes: ``async`` -- workers never wait for the learner; the learner trains whenever it has
data; ``sync`` -- the same components in lockstep (every worker sends one batch, then waits
while the learner updates and publishes, and acts on only once it holds the policy of the new
round), the baseline of the design write-up's comparison.

Async rate limit: simulated workers step ~100x faster than a CPU learner updates. Workers
may run ``learner.rate_limit_slack`` transitions ahead of what the learner can use at
``learner.min_updates_per_step`` updates per transition
(:meth:`~async_rl_ros.core.learning.learner.Learner.env_steps_wanted`); beyond that they skip
stepping, still polling weights -- a sample-to-insert limiter in the manner of Reverb
(Cassirer et al., 2021), never a round trip with the learner. The counters live in lock-free
shared memory (one slot per worker), so a worker killed mid-update cannot leave a lock held.

A worker process that dies is respawned and acts with the current policy at once. One that
cannot run ends the run instead: it stopped on an expected failure (a robot that needs a
person, a configuration it cannot run), or its slot's processes died
:data:`MAX_FRUITLESS_STARTS` times in a row before their first transition. The body of a
worker process is :func:`~async_rl_ros.local.worker_process.worker_main`.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import multiprocessing as mp
from multiprocessing import connection
import queue
import threading
import time
from typing import Any, Callable

from async_rl_ros.core.config import ConfigError, EnvWorkerConfig, LearnerConfig
from async_rl_ros.core.config import LocalRunnerConfig
from async_rl_ros.core.learning.learner import Learner
from async_rl_ros.core.learning.loop import Received
from async_rl_ros.core.records import PolicyState, TRANSITION_FIELDS
from async_rl_ros.core.transport.double_buffer import DoubleBuffer
from async_rl_ros.core.weights.receiver import weights_summary
from async_rl_ros.core.workers.machine import check_memory, default_num_workers
from async_rl_ros.core.workers.realtime import keep_off_the_arm
from async_rl_ros.local.lifecycle import check_child_exit, WorkerFailed
from async_rl_ros.local.weight_path import LocalWeightPath
from async_rl_ros.local.worker_process import worker_main, WorkerShared

__all__ = ['LocalTransport']

_LOG = logging.getLogger(__name__)
RESPAWN_DELAY_S = 0.5       # s between liveness checks of the worker processes
#: workers of one slot in a row that may die before their first transition: the next death
#: ends the run (a worker that cannot start, as a broken task plug-in, only dies again)
MAX_FRUITLESS_STARTS = 3
SYNC_STALL_S = 60.0         # s without any batch before a sync round goes on (a hung worker)
UNLIMITED = 2**62           # allowance of free-running workers
#: s a wait for batches lasts at most before it looks around again (the reader: the stop flag
#: and the queues of dead workers; a lockstep round: the stop flag and dead workers); a batch
#: ends the wait at once.
READ_WAIT_S = 0.02


@dataclasses.dataclass
class _WorkerHandle:
    process: Any
    started: float
    restarts: int = 0
    produced: int = 0   # the slot's transitions queued when this process started
    fruitless: int = 0  # processes of the slot before it that died before their first one


class LocalTransport:
    """
    Worker processes on this machine: the loop's batch source and weight sink.

    :param env_cfg: the ``env_worker`` section (every worker gets it, with its own seed).
    :param cfg: the ``learner`` section.
    :param runner: the ``local_runner`` section (mode, workers, transport sizes).
    :param initial: the policy state the weight path starts from (its layout).
    """

    def __init__(self, env_cfg: EnvWorkerConfig, cfg: LearnerConfig, runner: LocalRunnerConfig,
                 initial: PolicyState):
        self.env_cfg, self.cfg, self.rcfg = env_cfg, cfg, runner
        self.num_workers = runner.num_workers or default_num_workers()
        if env_cfg.backend == 'ur5' and self.num_workers != 1:
            raise ConfigError('local_runner.num_workers', runner.num_workers,
                              'exactly 1 with backend ur5 (one worker drives one physical arm)')
        check_memory(self.num_workers, runner.parameter_server.num_shards + 1,  # evaluator
                     'local_runner.num_workers', runner.num_workers)
        from async_rl_ros.envs.factory import needs_object_pose
        if needs_object_pose(env_cfg):
            raise ConfigError('backend', env_cfg.backend, f'sim for task {env_cfg.task.name} '
                              'without ROS 2: a physical cell takes the cube pose from a '
                              'camera on cell.pose_topic, which the ROS 2 env worker feeds '
                              '(ros2 launch async_rl_ros train.launch.py task:=push)')
        self.blocking = runner.mode == 'sync'
        self._ctx = mp.get_context('spawn')
        worker_cpus = None
        if env_cfg.backend == 'ur5':  # before any process starts: they inherit the learner's
            plan, every = keep_off_the_arm()
            worker_cpus = every if plan.arm is not None else None
        self.weights = LocalWeightPath(runner.parameter_server, runner.codec, initial)
        self.shared = WorkerShared(
            stop=self._ctx.Value('b', 0, lock=False),
            round=self._ctx.Value('q', 0, lock=False),
            round_version=self._ctx.Value('q', -1, lock=False),
            delivered=self._ctx.Array('q', self.num_workers, lock=False),
            produced=self._ctx.Array('q', self.num_workers, lock=False),
            allowance=self._ctx.Value('q', UNLIMITED, lock=False),
            beat=self._ctx.Value('q', 0, lock=False),
            version=self._ctx.Value('q', -1, lock=False),
            bells=[self._ctx.Semaphore(0) for _ in range(self.num_workers)] if self.blocking
            else [],
            boards=self.weights.board_names, obs_dim=int(initial.obs_mean.shape[0]),
            sync=self.blocking, cpus=worker_cpus)
        self.buffer = DoubleBuffer(self._preprocess)
        self.workers: dict[int, _WorkerHandle] = {}
        # One queue per worker process: a worker killed while it writes can leave its queue's
        # write lock held, which would block every other writer of a shared queue.
        self._queue_size = max(1, -(-runner.queue_batches // self.num_workers))
        self.queues: dict[int, Any] = {}
        self._retired: list[Any] = []  # queues of dead workers, drained then closed
        self.worker_stats: dict[int, dict[str, float]] = {}
        self.respawns = 0
        self.stalled_rounds = 0  # sync rounds that went on without a hung worker
        self.stopping = False
        self._steps_at_start = 0
        self._rate_state: dict[int, tuple[float, float]] = {}
        self._reader = threading.Thread(target=self._read_queue, name='transitions',
                                        daemon=True)
        self._last_check = 0.0
        self._should_stop: Callable[[], bool] = lambda: False

    # ------------------------------------------------------------------ lifecycle
    def start(self, learner: Learner,
              should_stop: Callable[[], bool] = lambda: False) -> None:
        """
        Start the reader thread and the worker processes.

        :param should_stop: the run's stop request, which also ends a lockstep round's wait.
        """
        self._should_stop = should_stop
        self._steps_at_start = learner.env_steps
        self.maintain(learner)
        self._reader.start()
        for worker_id in range(self.num_workers):
            self._spawn(worker_id)

    def _spawn(self, worker_id: int, fruitless: int = 0) -> None:
        handle = self.workers.get(worker_id)
        restarts = handle.restarts + 1 if handle else 0
        out = self._ctx.Queue(maxsize=self._queue_size)
        old = self.queues.get(worker_id)
        self.queues = {**self.queues, worker_id: out}  # replaced whole: the reader's view
        if old is not None:
            self._retired = self._retired + [old]
        process = self._ctx.Process(
            target=worker_main, name=f'env_worker_{worker_id}', daemon=True,
            args=(worker_id, self.env_cfg.to_flat(), tuple(self.cfg.sac.hidden_sizes),
                  self.rcfg.transition_batch, self.rcfg.max_batch_lag, restarts, self.shared,
                  out))
        process.start()
        self.workers[worker_id] = _WorkerHandle(process, time.monotonic(), restarts,
                                                int(self.shared.produced[worker_id]), fruitless)

    def shutdown(self) -> None:
        """Stop the workers, the shards and the threads; leave no process behind."""
        if self.stopping:
            return
        self.stopping = True
        self.shared.stop.value = 1
        self._ring()  # a lockstep worker waiting for its round sees the stop at once
        deadline = time.monotonic() + 10.0
        for handle in self.workers.values():
            handle.process.join(timeout=max(0.1, deadline - time.monotonic()))
        for handle in self.workers.values():
            if handle.process.is_alive():
                handle.process.kill()
                handle.process.join(timeout=2.0)
        if self._reader.is_alive():
            self._reader.join(timeout=2.0)
        self.buffer.close()
        for out in [*self.queues.values(), *self._retired]:
            out.cancel_join_thread()
            out.close()
        self.weights.close()

    # ------------------------------------------------------------------ BatchSource
    def _preprocess(self, message: tuple) -> tuple | None:
        transitions, episodes, stats = message
        if set(transitions) != set(TRANSITION_FIELDS):
            return None
        return transitions, episodes, stats

    def _read_queue(self) -> None:
        while not self.shared.stop.value:
            got = False
            for out in self.queues.values():
                try:
                    message = out.get_nowait()
                except queue.Empty:
                    continue
                except (EOFError, OSError):
                    return
                self.buffer.put(message)
                got = True
            if self._retired:  # what a dead worker queued, then its queue goes
                old = self._retired[0]
                try:
                    self.buffer.put(old.get_nowait())
                    got = True
                except (queue.Empty, EOFError, OSError):
                    self._retired = self._retired[1:]
                    old.cancel_join_thread()
                    old.close()
            if not got:
                # Blocks on the queues' pipes, not on a clock: polling at a millisecond woke
                # this thread a thousand times a second, and every wake-up took the GIL from
                # the training thread (about 15 % of its updates on a CPU learner). A queue's
                # ``_reader`` is its receiving Connection, which concurrent.futures' process
                # pool waits on the same way.
                try:
                    connection.wait([out._reader for out in self.queues.values()], READ_WAIT_S)
                except (OSError, ValueError):  # a queue closed under the wait: shutting down
                    return

    def take(self) -> list[Received]:
        """
        Return the batches that arrived.

        In lockstep a call first releases the workers for the next round, then waits until
        every worker sent its batch. The wait is on the batches, not on a clock: a worker that
        dies is respawned meanwhile and the new process sends the batch, a shard that dies is
        respawned so the workers get the round's policy, and a loaded machine only makes the
        round longer. Only a round in which no batch at all arrives for :data:`SYNC_STALL_S`
        (a hung worker process) goes on without the missing ones, with a warning.
        """
        if not self.blocking:
            return self._received(self.buffer.take())
        # The round's policy first: a worker released by the round reads it next.
        self.shared.round_version.value = self.weights.version
        self.shared.round.value += 1  # the only writer
        self._ring()
        out: list = []
        last_batch = time.monotonic()
        while (len(out) < self.num_workers and not self.shared.stop.value
               and not self._should_stop()):
            got = self.buffer.take()
            if got:
                out += got
                last_batch = time.monotonic()
                continue
            if time.monotonic() - last_batch > SYNC_STALL_S:
                _LOG.warning('sync round %d: %d of %d workers sent nothing for %.0f s; going '
                             'on without them', self.shared.round.value,
                             self.num_workers - len(out), self.num_workers, SYNC_STALL_S)
                self.stalled_rounds += 1
                break
            self.buffer.wait(READ_WAIT_S)
            if self._check_workers():
                self.weights.maintain()
        return self._received(out)

    def _ring(self) -> None:
        """Wake every lockstep worker waiting for its round (it reads the round counter)."""
        for bell in self.shared.bells:
            bell.release()

    def wait(self, timeout: float) -> None:
        """Block until a batch is ready or ``timeout`` s passed (the loop is idle)."""
        self.buffer.wait(timeout)

    def _received(self, ready: list) -> list[Received]:
        out = []
        for transitions, episodes, stats in ready:
            self.worker_stats[int(stats['worker_id'])] = stats
            out.append(Received(transitions, int(stats['worker_id']), list(episodes)))
        return out

    def maintain(self, learner: Learner) -> None:
        """Respawn dead workers and shards; pass on the rate limit and the heartbeat."""
        self.shared.beat.value = learner.updates + 1
        self.shared.version.value = learner.policy_version
        if not self.blocking and self.cfg.rate_limit_slack:
            wanted = learner.env_steps_wanted(self.cfg.rate_limit_slack)
            self.shared.allowance.value = wanted - self._steps_at_start
        self._check_workers()
        self.weights.maintain()

    def _check_workers(self) -> bool:
        """Respawn dead workers (every :data:`RESPAWN_DELAY_S` at most); return if it looked."""
        now = time.monotonic()
        if now - self._last_check < RESPAWN_DELAY_S or self.stopping:
            return False
        self._last_check = now
        for worker_id, handle in list(self.workers.items()):
            if not handle.process.is_alive() and not self.shared.stop.value:
                # A worker that stopped on NeedsPerson is not respawned: the run stops.
                name, code = f'env worker {worker_id}', handle.process.exitcode
                check_child_exit(name, code)
                fruitless = (handle.fruitless + 1
                             if self.shared.produced[worker_id] == handle.produced else 0)
                if fruitless >= MAX_FRUITLESS_STARTS:
                    raise WorkerFailed(f'{name} died {fruitless} times in a row before its '
                                       f'first transition (the last with exit code {code}); '
                                       'its reason is in the lines above')
                _LOG.warning('env worker %d exited (code %s); respawning', worker_id, code)
                self._spawn(worker_id, fruitless)
                self.respawns += 1  # after the new handle is in place, for observers
        return True

    # ------------------------------------------------------------------ WeightSink
    def publish(self, state: PolicyState) -> int | None:
        """Commit a state to the parameter-server shards; return the version workers get."""
        return self.weights.publish(state)

    # ------------------------------------------------------------------ metrics
    def worker_rates(self) -> dict[str, float]:
        """Return each worker's env steps/s since the previous call."""
        now, out = time.monotonic(), {}
        for worker_id, stats in sorted(self.worker_stats.items()):
            if worker_id not in self.workers:
                continue
            then, steps = self._rate_state.get(worker_id, (self.workers[worker_id].started, 0))
            if now > then and stats['steps'] >= steps:  # a respawned worker counts from 0
                out[f'workers/{worker_id}/steps_per_s'] = (stats['steps'] - steps) / (now - then)
            self._rate_state[worker_id] = (now, stats['steps'])
        return out

    def metrics(self) -> dict[str, float]:
        """Return transport metrics: queue depths, drops, rejections, respawns, weights."""
        depth = self.buffer.depth()
        stats = self.worker_stats.values()
        out = {'transport/raw_queue': float(depth['raw']),
               'transport/ready_batches': float(depth['ready']),
               'transport/dropped_batches': float(sum(s['dropped'] for s in stats)),
               'transport/rejected_packets': float(sum(s['rejected'] for s in stats)),
               'transport/respawns': float(self.respawns),
               'transport/stalled_rounds': float(self.stalled_rounds),
               'transport/rate_limited': float(sum(self.shared.produced)
                                               >= self.shared.allowance.value)}
        out.update({k: float(v) for k, v in self.weights.stats().items()})
        out.update(self.worker_rates())
        return out

    def summary(self) -> dict[str, Any]:
        """Return the run's transport figures for ``summary.json``."""
        metrics = self.metrics()
        out: dict[str, Any] = {
            'mode': self.rcfg.mode, 'workers': self.num_workers,
            'dropped_batches': int(metrics['transport/dropped_batches']),
            'rejected_packets': int(metrics['transport/rejected_packets']),
            'respawns': self.respawns}
        out.update(weights_summary(self.worker_stats.values(),
                                   self.weights.committer.fp32_bytes))
        out['shard_respawns'] = self.weights.respawns
        arms = [s['arm'] for s in self.worker_stats.values() if 'arm' in s]
        if arms:  # a physical arm: why episodes were cut short, stops it could not confirm
            interruptions: collections.Counter[str] = collections.Counter()
            for arm in arms:
                interruptions.update(arm.get('interruptions', {}))
            out['arm_interruptions'] = dict(interruptions)
            out['arm_stop_failures'] = sum(a.get('stop_failures', 0) for a in arms)
            out['arm_reconnects'] = sum(a.get('reconnects', 0) for a in arms)
            # each arm's control loop: step time percentiles, deadline misses by cause
            out['arm_control_loop'] = [
                {k: a[k] for k in ('step_ms', 'phase_ms', 'deadline_ms', 'deadline_misses',
                                   'first_action_ms', 'stops_in_effect', 'realtime') if k in a}
                for a in arms]
        return out
