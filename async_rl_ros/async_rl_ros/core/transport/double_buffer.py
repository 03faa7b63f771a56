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
The learner's ingest stage: a raw queue, a preprocessing thread and a double buffer.

The design write-up's scheme. Transport callbacks (worker pipes, ROS subscriptions) only
:meth:`DoubleBuffer.put` raw batches -- never blocking, never preprocessing. A background
thread takes them off the raw queue, runs ``preprocess`` (decode, validate, update the
normalizer statistics) and appends the result to the *inactive* half. The trainer calls
:meth:`DoubleBuffer.take`, which swaps the halves and hands over everything preprocessed so
far: it never waits on preprocessing while data is available, and the preprocessing thread
never waits on the trainer. A trainer with nothing to do blocks in :meth:`DoubleBuffer.wait`
until a batch is ready.

A full raw queue drops the oldest batch and counts it (``dropped``), so a stalled learner
cannot make producers block or memory grow without bound.
"""

from __future__ import annotations

from collections import deque
import logging
import threading
from typing import Any, Callable, Generic, TypeVar

__all__ = ['DoubleBuffer']

_LOG = logging.getLogger(__name__)
Raw = TypeVar('Raw')
Ready = TypeVar('Ready')


class DoubleBuffer(Generic[Raw, Ready]):
    """
    Raw queue -> preprocessing thread -> inactive half; :meth:`take` swaps halves.

    :param preprocess: turns one raw batch into a ready one, or ``None`` to reject it
        (counted in ``rejected``); exceptions are logged and counted the same way.
    :param max_raw: raw batches queued before the oldest is dropped.
    """

    def __init__(self, preprocess: Callable[[Raw], Ready | None], max_raw: int = 1024):
        self.preprocess = preprocess
        self._raw: deque[Raw] = deque()
        self.max_raw = max_raw
        self._halves: list[list[Ready]] = [[], []]
        self._inactive = 0  # index of the half the preprocessing thread fills
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._stop = False
        self.received = 0
        self.processed = 0
        self.dropped = 0
        self.rejected = 0
        self.swaps = 0
        self._busy = False  # the thread holds a batch it took off the raw queue
        self._thread = threading.Thread(target=self._run, name='preprocess', daemon=True)
        self._thread.start()

    def put(self, raw: Raw) -> None:
        """Queue a raw batch; never blocks (drops the oldest when the queue is full)."""
        with self._wake:
            if len(self._raw) >= self.max_raw:
                self._raw.popleft()
                self.dropped += 1
            self._raw.append(raw)
            self.received += 1
            self._wake.notify()

    def take(self) -> list[Ready]:
        """Swap the halves and return every batch preprocessed since the last call."""
        with self._lock:
            ready = self._halves[self._inactive]
            if not ready:
                return []
            self._halves[self._inactive] = []
            self._inactive = 1 - self._inactive
            self.swaps += 1
        return ready

    def wait(self, timeout: float) -> bool:
        """
        Block until a preprocessed batch is ready to :meth:`take` or ``timeout`` s passed.

        An idle trainer waits here instead of sleeping on a clock: the preprocessing thread
        wakes it the moment a batch is ready (or :meth:`close` does). Return whether one is.
        """
        with self._wake:
            self._wake.wait_for(lambda: self._halves[self._inactive] or self._stop, timeout)
            return bool(self._halves[self._inactive])

    def depth(self) -> dict[str, int]:
        """Return queue depths: raw batches waiting and preprocessed batches ready."""
        with self._lock:
            return {'raw': len(self._raw), 'ready': len(self._halves[self._inactive])}

    def drain(self, timeout: float = 5.0) -> bool:
        """Wait until every queued raw batch has been preprocessed (tests, shutdown)."""
        with self._wake:
            return self._wake.wait_for(lambda: not self._raw and not self._busy, timeout)

    def close(self) -> None:
        """Stop the preprocessing thread (queued raw batches are discarded)."""
        with self._wake:
            self._stop = True
            self._wake.notify_all()
        self._thread.join(timeout=5.0)

    def _run(self) -> None:
        while True:
            with self._wake:
                self._wake.wait_for(lambda: self._raw or self._stop)
                if self._stop:
                    return
                raw = self._raw.popleft()
                self._busy = True
            ready = self._safe_preprocess(raw)
            with self._wake:
                self._busy = False
                if ready is None:
                    self.rejected += 1
                else:
                    self._halves[self._inactive].append(ready)
                    self.processed += 1
                self._wake.notify_all()

    def _safe_preprocess(self, raw: Any) -> Ready | None:
        try:
            return self.preprocess(raw)
        except Exception:  # noqa: B902 -- a bad batch must not kill the ingest thread
            _LOG.exception('preprocessing a batch failed; batch rejected')
            return None
