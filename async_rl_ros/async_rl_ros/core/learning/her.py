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
Hindsight experience replay: relabel finished episodes with goals they achieved.

Andrychowicz et al. 2017, "Hindsight Experience Replay" (arXiv:1707.01495), Algorithm 1:
after an episode, every transition is stored again ``k`` times with a goal replaced by a
position the episode actually reached, and the reward recomputed for that goal. With the
``future`` strategy the goal is achieved at the same step or a later one of the episode; with
``final`` it is where the episode ended.

Transport-independent: :class:`HindsightRelabeler` eats the transition batches the learner
ingests, keeps one episode accumulator per worker (a worker's transitions arrive in order;
``terminated | truncated`` closes its episode, and so does a gap where ``obs`` is not the
previous ``next_obs``, e.g. a dropped batch) and returns the relabeled copies of each closed
episode. What a goal is comes from the task through its
:class:`~async_rl_ros.core.tasks.GoalSpec` (core never imports a task); the copies keep
``action``, ``policy_version``, ``worker_id`` and ``source`` of their originals.
"""

from __future__ import annotations

from typing import Any, Mapping

from async_rl_ros.core.config import HindsightConfig
from async_rl_ros.core.records import TRANSITION_FIELDS
from async_rl_ros.core.tasks import GoalSpec
import numpy as np

__all__ = ['HindsightRelabeler', 'MAX_EPISODE_STEPS']

#: An episode longer than this is relabeled in segments of this length (bounds the memory).
MAX_EPISODE_STEPS = 10_000


class HindsightRelabeler:
    """
    Per-worker episode accumulators that emit ``k`` relabeled copies of each closed episode.

    :param cfg: ``k`` and ``strategy``.
    :param spec: the environment's goal spec.
    :param rng: random generator of the goal draws.
    """

    def __init__(self, cfg: HindsightConfig, spec: GoalSpec, rng: np.random.Generator):
        if not isinstance(spec, GoalSpec):
            raise TypeError(f'goal spec {spec!r} lacks part of the GoalSpec protocol')
        self.cfg = cfg
        self.spec = spec
        self.rng = rng
        self._open: dict[int, list[dict[str, np.ndarray]]] = {}
        self._length: dict[int, int] = {}
        self.episodes = 0    # episodes relabeled
        self.relabeled = 0   # copies emitted

    def pending(self, worker: int) -> int:
        """Return how many transitions of ``worker``'s open episode wait for its end."""
        return self._length.get(int(worker), 0)

    def add(self, batch: Mapping[str, Any]) -> dict[str, np.ndarray] | None:
        """
        Account a batch of transitions (every field of the transition schema).

        :returns: the relabeled copies of the episodes this batch closed, as one batch, or
            ``None`` when none closed.
        """
        n = int(np.shape(batch['obs'])[0])
        if n == 0:
            return None
        columns = {name: _rows(batch, name, n) for name in TRANSITION_FIELDS if name in batch}
        done = columns['terminated'] | columns['truncated']
        out: list[dict[str, np.ndarray]] = []
        workers = columns['worker_id']
        for worker in np.unique(workers):
            rows = np.flatnonzero(workers == worker)
            out += self._add_worker(int(worker), {k: v[rows] for k, v in columns.items()},
                                    done[rows])
        if not out:
            return None
        return {k: np.concatenate([o[k] for o in out]) for k in out[0]}

    def _add_worker(self, worker: int, rows: dict[str, np.ndarray],
                    done: np.ndarray) -> list[dict[str, np.ndarray]]:
        out = []
        start = 0
        ends = set(np.flatnonzero(done).tolist())
        # Cut where the worker's stream is not continuous (a lost batch, a restarted worker).
        obs, nxt = rows['obs'], rows['next_obs']
        gaps = np.flatnonzero(np.any(obs[1:] != nxt[:-1], axis=1)) + 1
        pieces = sorted(ends | {int(g) - 1 for g in gaps} | {len(done) - 1})
        for last in pieces:
            piece = {k: v[start:last + 1] for k, v in rows.items()}
            start = last + 1
            if not len(piece['obs']):
                continue
            opened = self._open.get(worker)
            if opened and np.any(opened[-1]['next_obs'][-1] != piece['obs'][0]):
                out += self._close(worker)
            self._open.setdefault(worker, []).append(piece)
            self._length[worker] = self._length.get(worker, 0) + len(piece['obs'])
            if last in ends or self._length[worker] >= MAX_EPISODE_STEPS:
                out += self._close(worker)
        return out

    def _close(self, worker: int) -> list[dict[str, np.ndarray]]:
        pieces = self._open.pop(worker, [])
        self._length.pop(worker, None)
        if not pieces or self.cfg.k == 0:
            return []
        episode = {k: np.concatenate([p[k] for p in pieces]) for k in pieces[0]}
        copies = self.relabel(episode)
        self.episodes += 1
        self.relabeled += len(copies['obs'])
        return [copies]

    def relabel(self, episode: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """
        Return ``k`` relabeled copies of every transition of one episode (copy-major order).

        :param episode: one worker's consecutive transitions, oldest first.
        """
        spec, k = self.spec, self.cfg.k
        length = len(episode['obs'])
        achieved = np.asarray(spec.achieved(episode['next_obs']))
        t = np.tile(np.arange(length), k)
        if self.cfg.strategy == 'future':
            # A step j >= t, uniformly: the goal reached right after step j.
            j = t + np.floor(self.rng.random(t.size) * (length - t)).astype(np.int64)
        else:
            j = np.full(t.size, length - 1)
        goal = achieved[j]
        out = {name: value[t] for name, value in episode.items()}
        out['obs'] = np.asarray(spec.with_goal(out['obs'], goal), dtype=np.float32)
        out['next_obs'] = np.asarray(spec.with_goal(out['next_obs'], goal), dtype=np.float32)
        reached = np.asarray(spec.achieved(out['next_obs']))
        out['reward'] = np.asarray(spec.compute_reward(reached, goal, {'action': out['action']}),
                                   dtype=np.float32).reshape(-1)
        if spec.terminate_on_success:
            out['terminated'] = np.asarray(spec.is_success(reached, goal), dtype=bool).reshape(-1)
        return out


def _rows(batch: Mapping[str, Any], name: str, n: int) -> np.ndarray:
    """Return field ``name`` as an array of ``n`` rows (scalars are broadcast)."""
    dtype, kind = TRANSITION_FIELDS[name]
    value = np.asarray(batch[name], dtype=dtype)
    if not kind:
        return np.broadcast_to(value.reshape(-1) if value.ndim else value, (n,)).copy()
    return value.reshape(n, -1)
