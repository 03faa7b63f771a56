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
The learner node's ingest: ``TransitionBatch`` messages in, checked batches out.

Subscriptions only :meth:`TransitionIngest.put` a message (enqueue); the double buffer's
preprocessing thread converts it (:func:`~async_rl_ros.ros.conversions.msg_to_batch`: fields
and dimensions checked before anything is allocated) and refuses a malformed one or one
delivered a second time, counting each refusal by reason; the training thread
:meth:`~TransitionIngest.take` s what is ready.
"""

from __future__ import annotations

import collections
import threading

from async_rl_ros.core.transport.double_buffer import DoubleBuffer
from async_rl_ros.core.transport.duplicates import RecentKeys
from async_rl_ros.core.weights.codec import CodecError
from async_rl_ros.ros.conversions import msg_to_batch

__all__ = ['DUPLICATE_WINDOW', 'TransitionIngest']

DUPLICATE_WINDOW = 1024   # batches per worker remembered to refuse a second delivery


class TransitionIngest:
    """
    Transition messages -> ``(batch, worker_id, source)``; refusals counted, never raised.

    :param obs_dim: the task's observation size (a message of another size is refused).
    :param act_dim: the task's action size.
    :param max_raw: messages held before preprocessing; beyond it the oldest are dropped.
    """

    def __init__(self, obs_dim: int, act_dim: int, max_raw: int):
        self.obs_dim, self.act_dim = obs_dim, act_dim
        self._lock = threading.Lock()  # the counters: written here, read by the node's timers
        self._rejected: collections.Counter[str] = collections.Counter()
        self._seen = RecentKeys(DUPLICATE_WINDOW)  # preprocessing thread only
        self.buffer = DoubleBuffer(self._preprocess, max_raw=max_raw)

    def put(self, msg) -> None:
        """Subscription callback: enqueue, nothing else."""
        self.buffer.put(msg)

    def take(self) -> list[tuple[dict, int, str]]:
        """Return the batches preprocessed since the last call (training thread)."""
        return self.buffer.take()

    def wait(self, timeout: float) -> None:
        """Block until a batch is ready or ``timeout`` s passed (idle training thread)."""
        self.buffer.wait(timeout)

    def _preprocess(self, msg) -> tuple[dict, int, str] | None:
        """
        Preprocessing thread: message -> batch, or ``None`` with the reason counted.

        A batch delivered a second time (same worker, same header stamp) is counted as
        ``duplicate`` and refused; unstamped batches (stamp 0) are not checked.
        """
        try:
            batch = msg_to_batch(msg, self.obs_dim, self.act_dim)
        except CodecError as exc:
            self._count(exc.reason)
            return None
        stamp = int(msg.header.stamp.sec) * 1_000_000_000 + int(msg.header.stamp.nanosec)
        if stamp and not self._seen.fresh(int(msg.worker_id), stamp):
            self._count('duplicate')
            return None
        return batch, int(msg.worker_id), msg.source

    def _count(self, reason: str) -> None:
        with self._lock:
            self._rejected[reason] += 1

    @property
    def dropped(self) -> int:
        """Messages dropped unprocessed (the raw queue was full)."""
        return int(self.buffer.dropped)

    def counts(self) -> dict[str, int]:
        """Return the messages received, preprocessed, dropped and refused so far."""
        buffer = self.buffer
        return {'received': buffer.received, 'processed': buffer.processed,
                'dropped': buffer.dropped, 'rejected': buffer.rejected}

    def rejected(self) -> dict[str, int]:
        """Return the refused batches by reason."""
        with self._lock:
            return dict(self._rejected)

    def rejected_total(self) -> int:
        """Return the batches refused so far."""
        return sum(self.rejected().values())

    def close(self) -> None:
        """Stop the preprocessing thread."""
        self.buffer.close()
