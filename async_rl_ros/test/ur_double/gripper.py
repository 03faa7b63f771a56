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
A Robotiq 2F-85 behind the URCap socket (63352) of the controller double.

``GET VAR`` answers ``VAR value`` and a line end, ``SET VAR value ...`` answers ``ack``
without one (as the public URCap clients expect), anything else ``?``. Activation takes
:data:`ACTIVATION_S` (STA 1, then 3, fingers open); with GTO 1 the fingers move toward the
requested position at the commanded speed and stop on a simulated object (OBJ 2) or at the
position (OBJ 3). The motion is integrated on each request, so no thread runs. Faults come
through the control port (:meth:`GripperDouble.control`): ``gripper_object_width_m W``
(``none`` for no object), ``gripper_silent true|false``, ``gripper_fault CODE``,
``gripper_drop``, ``gripper_power_cycle``; ``gripper`` returns the state.
"""

from __future__ import annotations

import socket
import threading
import time

__all__ = ['GripperDouble', 'PORT']

PORT = 63352
ACTIVATION_S = 0.5
OPEN_WIDTH_M = 0.085
CLOSED_COUNT = 227             # count at which the empty fingers touch
SPEED_MPS = (0.020, 0.150)     # finger speed at SPE 0 and 255
_WRITABLE = {'ACT': 1, 'GTO': 1, 'ATR': 1, 'ADR': 1, 'POS': 255, 'SPE': 255, 'FOR': 255}


class GripperDouble:
    """
    The simulated gripper, shared by every connection to its port.

    :param wait_stall: called before each answer (the server's link stall).
    """

    def __init__(self, wait_stall=lambda: None):
        self.wait_stall = wait_stall
        self.lock = threading.Lock()
        self._socks: set[socket.socket] = set()
        self.power_cycle()

    def power_cycle(self) -> None:
        """Back to the state at power-on: not activated, open, no object, no fault."""
        with self.lock:
            self.regs = {'ACT': 0, 'GTO': 0, 'ATR': 0, 'ADR': 0, 'POS': 0, 'SPE': 0, 'FOR': 0}
            self.position = 0.0         # actual count (float: integrated motion)
            self.sta = self.obj = self.flt = 0
            self.active_at = 0.0
            self.object_width_m: float | None = None
            self.silent = False
            self.counts = {'sets': 0, 'gets': 0, 'resets': 0, 'activations': 0}
            self.last = time.monotonic()

    # ------------------------------------------------------------------ simulation
    def _advance(self, now: float) -> None:
        dt, self.last = now - self.last, now
        if self.sta == 1 and now >= self.active_at:
            self.sta, self.position = 3, 0.0
        if self.sta != 3 or not self.regs['GTO'] or self.obj != 0 or self.flt:
            return   # not active, no go-to, arrived or stopped, or faulted: no motion
        low, high = SPEED_MPS
        speed = low + (high - low) * self.regs['SPE'] / 255
        step = dt * speed * CLOSED_COUNT / OPEN_WIDTH_M
        target = min(float(self.regs['POS']), float(CLOSED_COUNT))
        if target > self.position:
            contact = None
            if self.object_width_m is not None:
                contact = CLOSED_COUNT * (1.0 - self.object_width_m / OPEN_WIDTH_M)
            if contact is not None and contact < target and self.position + step >= contact:
                self.position, self.obj = max(self.position, contact), 2
                return
            self.position = min(self.position + step, target)
        else:
            self.position = max(self.position - step, target)
        if self.position == target:
            self.obj = 3

    def _set(self, var: str, value: int) -> None:
        if var == 'ACT' and value == 0:
            self.counts['resets'] += 1
            self.sta = self.obj = self.flt = 0
            self.regs['GTO'] = 0
        elif var == 'ACT' and not self.regs['ACT']:
            self.counts['activations'] += 1
            self.sta, self.active_at = 1, self.last + ACTIVATION_S
        elif var == 'GTO' and value and self.sta != 3:
            self.flt = 5 if self.sta == 1 else 7   # action before the activation completed
        elif var in ('GTO', 'POS'):
            self.obj = 0                           # a new motion starts (or stops, GTO 0)
        self.regs[var] = value

    def _value(self, var: str) -> str | None:
        values = {'POS': round(self.position), 'PRE': self.regs['POS'], 'STA': self.sta,
                  'OBJ': self.obj, 'FLT': f'{self.flt:02d}'}
        if var in values:
            return f'{var} {values[var]}'
        return f'{var} {self.regs[var]}' if var in self.regs else None

    def answer(self, line: str) -> bytes:
        """Return the answer to one request line."""
        words = line.split()
        with self.lock:
            self._advance(time.monotonic())
            if len(words) == 2 and words[0] == 'GET':
                self.counts['gets'] += 1
                value = self._value(words[1])
                return b'?' if value is None else value.encode() + b'\n'
            pairs = list(zip(words[1::2], words[2::2]))
            if words[:1] != ['SET'] or len(words) < 3 or len(words) % 2 == 0 or not all(
                    v in _WRITABLE and n.isdigit() and int(n) <= _WRITABLE[v] for v, n in pairs):
                return b'?'
            self.counts['sets'] += 1
            for var, value in pairs:
                self._set(var, int(value))
            return b'ack'

    # ------------------------------------------------------------------ sockets
    def client(self, sock: socket.socket) -> None:
        """Serve one connection until it closes (``DoubleServer`` handler)."""
        with self.lock:
            self._socks.add(sock)
        try:
            for raw in sock.makefile('rb'):
                line = raw.decode(errors='replace').strip()
                if not line or self.silent:
                    continue
                self.wait_stall()
                sock.sendall(self.answer(line))
        finally:
            with self.lock:
                self._socks.discard(sock)

    def drop(self) -> int:
        """Close every connection to the gripper port; return how many."""
        with self.lock:
            socks, self._socks = list(self._socks), set()
        for sock in socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return len(socks)

    def control(self, verb: str, args: list[str]) -> dict[str, object]:
        """Serve a ``gripper*`` verb of the control port."""
        if verb == 'gripper':
            with self.lock:
                self._advance(time.monotonic())
                return {'position': self.position, 'requested': self.regs['POS'],
                        'sta': self.sta, 'obj': self.obj, 'flt': self.flt,
                        'regs': dict(self.regs), 'object_width_m': self.object_width_m,
                        'silent': self.silent, **self.counts}
        if verb == 'gripper_object_width_m':
            with self.lock:
                self.object_width_m = None if args[0] == 'none' else float(args[0])
        elif verb == 'gripper_silent':
            self.silent = not args or args[0] == 'true'
        elif verb == 'gripper_fault':
            with self.lock:
                self.flt = int(args[0])
        elif verb == 'gripper_drop':
            return {'ok': True, 'dropped': self.drop()}
        elif verb == 'gripper_power_cycle':
            self.power_cycle()
        else:
            raise ValueError(f'unknown control verb {verb!r}')
        return {'ok': True}
