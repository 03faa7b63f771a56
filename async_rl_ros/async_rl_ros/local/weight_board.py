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
The latest weights packet in shared memory: one writer, many non-blocking readers.

A sequence lock (Lamport's seqlock): the writer makes the sequence number odd, writes the
packet, and makes it even again; a reader copies the packet and keeps it only if the sequence
number was the same even value before and after. Readers never block the writer or each
other, and a torn read is simply retried at the next poll. Packets carry their own CRC, so
even a read the seqlock missed would be rejected by the decoder.

Layout: ``[seq u64][version i64][length u64][payload ...]``.
"""

from __future__ import annotations

from multiprocessing import shared_memory

import numpy as np

__all__ = ['WeightBoard']

_HEADER = 24  # bytes


class WeightBoard:
    """
    Shared-memory slot holding the newest weights packet.

    :param name: attach to an existing board (workers); ``None`` creates one (learner).
    :param capacity: payload bytes (creator only).
    """

    def __init__(self, name: str | None = None, capacity: int = 8 << 20):
        if name is None:
            self.shm = shared_memory.SharedMemory(create=True, size=_HEADER + capacity)
            self.owner = True
        else:
            # Worker processes share the creator's resource tracker (spawn passes it on),
            # so attaching does not let a worker's exit unlink the segment.
            self.shm = shared_memory.SharedMemory(name=name)
            self.owner = False
        self._header = np.ndarray((3,), dtype=np.int64, buffer=self.shm.buf[:_HEADER])
        self.capacity = self.shm.size - _HEADER
        if self.owner:
            self._header[:] = (0, -1, 0)
        self.seen_version = -1

    @property
    def name(self) -> str:
        """Return the shared-memory name workers attach with."""
        return self.shm.name

    def publish(self, packet: bytes, version: int) -> None:
        """Write a packet (writer side; one writer only)."""
        n = len(packet)
        if n > self.capacity:
            raise ValueError(f'weights packet of {n} bytes exceeds the board ({self.capacity})')
        self._header[0] += 1  # odd: writing
        self.shm.buf[_HEADER:_HEADER + n] = packet
        self._header[1] = version
        self._header[2] = n
        self._header[0] += 1  # even: stable

    def poll(self) -> tuple[int, bytes] | None:
        """Return ``(version, packet)`` if a newer stable packet is there, else ``None``."""
        seq = int(self._header[0])
        version = int(self._header[1])
        if seq % 2 or version <= self.seen_version:
            return None
        n = int(self._header[2])
        packet = bytes(self.shm.buf[_HEADER:_HEADER + n])
        if int(self._header[0]) != seq:
            return None  # overwritten while copying: take the next one
        self.seen_version = version
        return version, packet

    def close(self) -> None:
        """Detach (and remove the segment if this process created it)."""
        del self._header
        self.shm.close()
        if self.owner:
            self.shm.unlink()
