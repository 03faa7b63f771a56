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
The evaluator process: scores policy snapshots on fixed seeds while training goes on.

The training loop submits a snapshot every ``learner.eval_every`` env steps; the process runs
``learner.eval_episodes`` deterministic episodes of it on the task's simulated environment
(the same seeds for every snapshot) and sends the statistics back. One snapshot at a time: a
snapshot submitted while the previous one is still being scored is skipped, so the learner
never waits.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
from typing import Any, Sequence

from async_rl_ros.core.config import EnvWorkerConfig
from async_rl_ros.core.learning.evaluation import EpisodeStats, EvaluationStopped
from async_rl_ros.core.records import PolicyState
from async_rl_ros.local.lifecycle import child_entry

__all__ = ['EvaluatorProcess']


@child_entry('evaluator')  # dies with the learner; SIGINT ignored (stopped via ``stop``)
def _evaluator_main(env_flat: dict, hidden: Sequence[int], episodes: int, jobs: Any,
                    results: Any, stop: Any) -> None:
    import torch

    from async_rl_ros.core.workers.inline import PolicyEvaluator
    from async_rl_ros.envs.factory import evaluation_env

    torch.set_num_threads(1)
    env, spec = evaluation_env(EnvWorkerConfig.from_flat(env_flat))  # never a real arm
    # A stop ends the snapshot being scored after its current episode: close() need not wait.
    evaluator = PolicyEvaluator(env, hidden, episodes, rank=spec.rank,
                                should_stop=lambda: bool(stop.value))
    try:
        while not stop.value:
            try:
                state = jobs.get(timeout=0.2)
            except queue.Empty:
                continue
            results.put((state.version, evaluator.score(state)))
    except EvaluationStopped:
        pass
    finally:
        env.close()


class EvaluatorProcess:
    """
    An :class:`~async_rl_ros.core.learning.loop.Evaluator` in a process of its own.

    :param env_cfg: the ``env_worker`` section (always evaluated on the simulated arm).
    :param hidden: hidden layer widths of the actor.
    :param episodes: episodes per snapshot.
    """

    def __init__(self, env_cfg: EnvWorkerConfig, hidden: Sequence[int], episodes: int):
        ctx = mp.get_context('spawn')
        self._jobs, self._results = ctx.Queue(), ctx.Queue()
        self._stop = ctx.Value('b', 0, lock=False)  # lock-free: a killed child holds no lock
        self.process = ctx.Process(target=_evaluator_main, name='evaluator', daemon=True,
                                   args=(env_cfg.to_flat(), tuple(hidden), int(episodes),
                                         self._jobs, self._results, self._stop))
        self.process.start()
        self._busy = False

    def submit(self, state: PolicyState) -> bool:
        """Queue a snapshot unless one is being scored; return whether it was queued."""
        if self._busy or not self.process.is_alive():
            return False
        self._jobs.put(state)
        self._busy = True
        return True

    def poll(self) -> list[tuple[int, EpisodeStats]]:
        """Return the finished scores."""
        out = []
        while True:
            try:
                out.append(self._results.get_nowait())
            except queue.Empty:
                break
        if out:
            self._busy = False
        return out

    def close(self) -> None:
        """Stop the process (it is a daemon: it never outlives the trainer)."""
        self._stop.value = 1
        self.process.join(timeout=5.0)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout=2.0)
        for q in (self._jobs, self._results):
            q.cancel_join_thread()
            q.close()
