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

Layout: ``[seq u64][version i64][length u64][payload ...]``. The writer may be a process
other than the creator (a shard process writes on a board its learner created, so the board
outlives a shard that dies); a writer that died mid-write leaves an odd sequence number, which
the next writer closes before it writes.
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
        seq = int(self._header[0]) | 1  # odd: writing (already odd if a writer died here)
        self._header[0] = seq
        self.shm.buf[_HEADER:_HEADER + n] = packet
        self._header[1] = version
        self._header[2] = n
        self._header[0] = seq + 1  # even: stable

    @property
    def version(self) -> int:
        """Return the version on the board now (-1: empty), without copying the packet."""
        return int(self._header[1])

    def poll(self) -> tuple[int, bytes] | None:
        """Return ``(version, packet)`` if a newer stable packet is there, else ``None``."""
        if self.version <= self.seen_version:
            return None
        got = self.read()
        if got is not None:
            self.seen_version = got[0]
        return got

    def read(self) -> tuple[int, bytes] | None:
        """Return the stable ``(version, packet)`` on the board, seen or not (else ``None``)."""
        seq = int(self._header[0])
        version = int(self._header[1])
        if seq % 2 or version < 0:
            return None
        n = int(self._header[2])
        packet = bytes(self.shm.buf[_HEADER:_HEADER + n])
        if int(self._header[0]) != seq:
            return None  # overwritten while copying: take the next one
        return version, packet

    def close(self) -> None:
        """Detach (and remove the segment if this process created it)."""
        del self._header
        self.shm.close()
        if self.owner:
            self.shm.unlink()
