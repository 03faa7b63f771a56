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
Duplicate batches: the same batch of a worker delivered twice is taken once.

A reliable DDS reader already drops the retransmissions of a sample it has (sequence numbers
per writer), so a duplicate needs something outside one reader's view: a recording played
into a live learner, a relay or bridge between networks that sends a batch again. A worker
stamps every batch with its clock (``header.stamp``), strictly increasing, so ``(worker id,
stamp)`` names a batch; :class:`RecentKeys` remembers the last few of every worker.
"""

from __future__ import annotations

import collections
from typing import Hashable

__all__ = ['RecentKeys']


class RecentKeys:
    """
    Remember the last ``window`` keys of every sender; say whether a key is new.

    :param window: keys kept per sender (a duplicate older than that is taken again).
    """

    def __init__(self, window: int = 1024):
        if window < 1:
            raise ValueError(f'window = {window} must be >= 1')
        self.window = int(window)
        self._order: dict[Hashable, collections.deque] = {}
        self._keys: dict[Hashable, set] = {}
        self.duplicates = 0

    def fresh(self, sender: Hashable, key: Hashable) -> bool:
        """Record ``key`` of ``sender``; return ``False`` if it was seen recently (counted)."""
        keys = self._keys.setdefault(sender, set())
        if key in keys:
            self.duplicates += 1
            return False
        order = self._order.setdefault(sender, collections.deque())
        order.append(key)
        keys.add(key)
        if len(order) > self.window:
            keys.discard(order.popleft())
        return True
