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
Count a controller's RTDE packets: the rate the preflight checks, robust on a busy machine.

Polling a client's newest timestamp misses every packet that lands while the poller is not
scheduled, so on a busy machine it reads anything from a fraction to several times the true
rate. :func:`count_packets` opens an RTDE session of its own (protocol 2, output
``timestamp`` only, read-only: no input recipe), lets the kernel queue the packets and counts
every one over a window; the window's length is taken from the first and last packets'
controller timestamps, so a late reader does not change the result. Standard library only.
"""

from __future__ import annotations

import dataclasses
import socket
import struct
import time

__all__ = ['PacketCount', 'count_packets', 'RTDE_PORT']

RTDE_PORT = 30004
_VERSION, _SETUP_OUTPUTS, _START, _PAUSE, _DATA = b'V', b'O', b'S', b'P', b'U'
_HEADER = struct.Struct('>HB')


@dataclasses.dataclass
class PacketCount:
    """Packets counted and the controller time they span."""

    packets: int
    span_s: float   #: controller time between the first and the last packet (s)

    @property
    def rate(self) -> float:
        """Return packets per second of controller time (0 without two packets)."""
        return (self.packets - 1) / self.span_s if self.packets > 1 and self.span_s > 0 else 0.0


def _send(sock: socket.socket, kind: bytes, payload: bytes = b'') -> None:
    sock.sendall(_HEADER.pack(_HEADER.size + len(payload), kind[0]) + payload)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b''
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError('the controller closed the RTDE connection')
        data += chunk
    return data


def _receive(sock: socket.socket, want: bytes | None = None) -> tuple[bytes, bytes]:
    """Return the next package (kind, payload) -- of kind ``want`` if given (others skipped)."""
    while True:
        size, kind = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
        payload = _recv_exact(sock, size - _HEADER.size)
        if want is None or kind == want[0]:
            return bytes([kind]), payload


def count_packets(ip: str, frequency: float, window_s: float = 1.0,
                  timeout: float = 2.0) -> PacketCount:
    """
    Count the RTDE packets the controller at ``ip`` sends at ``frequency`` for ``window_s``.

    :raises OSError: no connection, or the controller refused the session (in words).
    """
    with socket.create_connection((ip, RTDE_PORT), timeout=timeout) as sock:
        _send(sock, _VERSION, struct.pack('>H', 2))
        if not _receive(sock, _VERSION)[1][:1] == b'\x01':
            raise OSError('the controller does not speak RTDE protocol version 2')
        _send(sock, _SETUP_OUTPUTS, struct.pack('>d', float(frequency)) + b'timestamp')
        recipe = _receive(sock, _SETUP_OUTPUTS)[1]
        if recipe[1:] != b'DOUBLE':
            raise OSError(f'the controller refused the output recipe ({recipe[1:]!r})')
        _send(sock, _START)
        if not _receive(sock, _START)[1][:1] == b'\x01':
            raise OSError('the controller refused to start the RTDE session')
        first = last = None
        packets = 0
        deadline = time.monotonic() + window_s
        while time.monotonic() < deadline:
            payload = _receive(sock, _DATA)[1]
            (stamp,) = struct.unpack_from('>d', payload, 1)
            first = stamp if first is None else first
            last = stamp
            packets += 1
        _send(sock, _PAUSE)
    return PacketCount(packets, (last - first) if packets else 0.0)
