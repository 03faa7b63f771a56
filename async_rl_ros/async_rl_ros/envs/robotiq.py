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
A client for a Robotiq 2F-85 on a UR controller, through the socket of the Robotiq URCap.

The URCap listens on TCP port 63352 of the controller and speaks ASCII, one request at a
time: ``GET VAR`` answers ``VAR value``, ``SET VAR value [VAR value ...]`` answers ``ack``,
and what it cannot serve (an unknown variable, any read while the robot is emergency-stopped)
answers ``?``. An answer may come without a line end (``ack`` usually does): it is complete
when nothing follows for 20 ms. Every answer is checked before use; whatever goes wrong on
the link raises :class:`GripperLinkError` with one line naming the request and what came
back, a gripper fault (``FLT`` not 0) raises :class:`GripperFault`. Standard library only.
"""

from __future__ import annotations

import dataclasses
import math
import re
import socket
import time

__all__ = ['RobotiqGripper', 'GripperState', 'MoveCommand', 'GripperError', 'GripperLinkError',
           'GripperFault', 'parse_answer', 'check_gripper', 'width_to_count', 'count_to_width',
           'speed_to_byte', 'force_to_byte', 'PORT', 'OPEN_WIDTH_M', 'CLOSED_COUNT']

PORT = 63352
OPEN_WIDTH_M = 0.085   #: finger opening at position count 0 (2F-85 stroke)
#: Position count of fully closed fingers. Requests go up to 255 but the fingers of a 2F-85
#: touch at about 227-230 (it differs a little between units): measure yours by closing it
#: empty and reading ``GET POS``, and pass that as ``closed_count``.
CLOSED_COUNT = 227
SPEED_RANGE_MPS = (0.020, 0.150)   #: datasheet finger speed at SPE 0 and 255
FORCE_RANGE_N = (20.0, 235.0)      #: datasheet grip force at FOR 0 and 255
FAULTS = {5: 'action delayed: the activation must complete first',
          7: 'the activation bit must be set before an action',
          8: 'maximum operating temperature exceeded', 9: 'no communication for at least 1 s',
          10: 'under minimum operating voltage', 11: 'automatic release in progress',
          12: 'internal fault', 13: 'activation fault', 14: 'overcurrent',
          15: 'automatic release completed'}
_RANGES = {'ACT': 1, 'GTO': 1, 'ATR': 1, 'ADR': 1, 'POS': 255, 'PRE': 255, 'SPE': 255,
           'FOR': 255, 'STA': 3, 'OBJ': 3, 'FLT': 255}
_WRITABLE = ('ACT', 'GTO', 'ATR', 'ADR', 'POS', 'SPE', 'FOR')
_VALUE = re.compile(r'([A-Z]{3}) ([0-9]{1,3})')
_QUIET_S = 0.02   # an answer without a line end is complete when nothing follows this long
_POLL_S = 0.02


class GripperError(RuntimeError):
    """Base of the gripper errors."""


class GripperLinkError(GripperError):
    """No usable answer: refused connection, timeout, closed socket or a malformed answer."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class GripperFault(GripperError):
    """The gripper reports a fault (``FLT`` not 0); a reset (reactivation) clears it."""

    def __init__(self, code: int):
        super().__init__(f'gripper fault FLT {code} (0x{code:02X}): '
                         f'{FAULTS.get(code, "unknown fault code")}')
        self.code = code


@dataclasses.dataclass(frozen=True)
class GripperState:
    """One reading of the gripper."""

    width_m: float    #: finger opening (m) from the actual position count
    position: int     #: actual position count (0 open .. about 227 closed)
    requested: int    #: echo of the requested position count (PRE)
    obj: int          #: OBJ: 0 moving, 1/2 stopped on contact opening/closing, 3 arrived
    fault: int        #: FLT, 0 without fault
    status: int       #: STA: 0 reset, 1 activating, 3 active
    active: bool      #: activated and ready (STA 3)

    @property
    def holding(self) -> bool:
        """Whether the fingers stopped on an object while closing (OBJ 2)."""
        return self.obj == 2


@dataclasses.dataclass(frozen=True)
class MoveCommand:
    """What :meth:`RobotiqGripper.move` sent."""

    position: int              #: POS count
    speed: int                 #: SPE, 0..255
    force: int                 #: FOR, 0..255
    width_m: float             #: opening requested after clipping and rounding (m)
    clipped: tuple[str, ...]   #: names of the arguments clipped to the 2F-85's ranges


def _scale(name: str, value: float, low: float, high: float, top: int) -> tuple[int, bool]:
    """Map ``value`` from ``[low, high]`` (clipped) to ``0..top``; say whether it was clipped."""
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f'{name} must be finite, not {value}')
    clipped = not low <= value <= high
    return round(top * (min(max(value, low), high) - low) / (high - low)), clipped


def speed_to_byte(speed_mps: float) -> tuple[int, bool]:
    """Return ``(SPE, clipped)`` for a finger speed: 0.02 m/s is 0, 0.15 m/s is 255."""
    return _scale('speed_mps', speed_mps, *SPEED_RANGE_MPS, 255)


def force_to_byte(force_n: float) -> tuple[int, bool]:
    """Return ``(FOR, clipped)`` for a grip force: 20 N is 0, 235 N is 255."""
    return _scale('force_n', force_n, *FORCE_RANGE_N, 255)


def width_to_count(width_m: float, closed_count: int = CLOSED_COUNT) -> tuple[int, bool]:
    """Return ``(POS, clipped)`` for a finger opening: 0.085 m is 0, 0 m is ``closed_count``."""
    count, clipped = _scale('width_m', width_m, 0.0, OPEN_WIDTH_M, closed_count)
    return closed_count - count, clipped


def count_to_width(count: int, closed_count: int = CLOSED_COUNT) -> float:
    """Return the finger opening (m) at a position count (0 m from ``closed_count`` on)."""
    return max(0.0, OPEN_WIDTH_M * (1.0 - count / closed_count))


def parse_answer(request: str, answer: str) -> int | None:
    """
    Check the answer to one request: the value of a ``GET``, ``None`` for a ``SET``'s ``ack``.

    :raises GripperLinkError: on anything else, naming the request and the answer.
    """
    verb, var = request.split()[:2]
    top = _RANGES.get(var, 255)
    if answer == '?':
        why = 'refused: unknown variable, or the robot is emergency-stopped'
    elif verb == 'SET':
        if answer == 'ack':
            return None
        why = "expected 'ack'"
    else:
        match = _VALUE.fullmatch(answer)
        if match is None or match.group(1) != var:
            why = f"expected '{var} <0..{top}>'"
        elif int(match.group(2)) > top:
            why = f'{var} out of its range 0..{top}'
        else:
            return int(match.group(2))
    raise GripperLinkError(f'asked {request!r}, got {answer[:60]!r} ({why})')


class RobotiqGripper:
    """
    A 2F-85 behind the URCap socket: one request at a time, no thread; use it from one thread.

    After a :class:`GripperLinkError` the socket is closed (a late answer would be taken for
    the next one): call :meth:`connect` again.

    :param host: the UR controller's address.
    :param port: the URCap's port.
    :param timeout_s: time allowed for connecting and for each answer (s).
    :param closed_count: position count of closed fingers (:data:`CLOSED_COUNT`).
    """

    def __init__(self, host: str, port: int = PORT, timeout_s: float = 1.0,
                 closed_count: int = CLOSED_COUNT):
        self.host, self.port, self.timeout_s = host, port, timeout_s
        self.closed_count = closed_count
        self._sock: socket.socket | None = None
        self._buffer = b''

    def __enter__(self) -> RobotiqGripper:
        self.connect()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def connect(self) -> None:
        """Open the connection (closing any previous one)."""
        self.close()
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.timeout_s)
        except OSError as exc:
            raise GripperLinkError(f'gripper {self.host}:{self.port}: asked to connect, got '
                                   f'{getattr(exc, "strerror", None) or exc} (is the Robotiq '
                                   'URCap installed and the gripper plugged in?)') from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock

    def close(self) -> None:
        """Close the connection; the gripper keeps its state."""
        sock, self._sock, self._buffer = self._sock, None, b''
        if sock is not None:
            sock.close()

    def _ask(self, request: str) -> int | None:
        """Send one request and return its checked answer (:func:`parse_answer`)."""
        where = f'gripper {self.host}:{self.port}'
        if self._sock is None:
            raise GripperLinkError(f'{where}: asked {request!r}, not connected')
        try:
            self._sock.sendall(request.encode('ascii') + b'\n')
            return parse_answer(request, self._read_answer())
        except GripperLinkError as exc:
            self.close()
            raise GripperLinkError(f'{where}: {exc.reason}') from None
        except socket.timeout:
            self.close()
            raise GripperLinkError(f'{where}: asked {request!r}, no answer within '
                                   f'{self.timeout_s:g} s') from None
        except OSError as exc:
            self.close()
            raise GripperLinkError(f'{where}: asked {request!r}, connection lost '
                                   f'({exc.strerror or exc})') from None

    def _read_answer(self) -> str:
        deadline = time.monotonic() + self.timeout_s
        while b'\n' not in self._buffer.lstrip() and self._buffer.strip() not in (b'ack', b'?'):
            partial = bool(self._buffer.strip())
            left = deadline - time.monotonic()
            self._sock.settimeout(max(1e-3, min(left, _QUIET_S) if partial else left))
            try:
                chunk = self._sock.recv(256)
            except socket.timeout:
                if partial:
                    break   # an answer without a line end, and nothing more came
                raise
            if not chunk:
                raise ConnectionError(0, 'closed by the gripper side')
            self._buffer += chunk
        line, _, self._buffer = self._buffer.lstrip().partition(b'\n')
        return line.decode('ascii', errors='replace').strip()

    def get_var(self, var: str) -> int:
        """Return one variable (``'POS'``, ``'STA'``, ``'FLT'``, ...)."""
        if var not in _RANGES:
            raise ValueError(f'unknown gripper variable {var!r}')
        return self._ask(f'GET {var}')

    def set_vars(self, **values: int) -> None:
        """Write variables in one ``SET``, in the order given (``POS=0, GTO=1``)."""
        for var, value in values.items():
            if var not in _WRITABLE or not 0 <= int(value) <= _RANGES[var]:
                raise ValueError(f'cannot set {var} to {value!r}')
        self._ask('SET ' + ' '.join(f'{var} {int(value)}' for var, value in values.items()))

    def state(self, check_fault: bool = True) -> GripperState:
        """
        Read the gripper (five requests).

        :param check_fault: raise :class:`GripperFault` when FLT is not 0.
        """
        status, fault = self.get_var('STA'), self.get_var('FLT')
        if fault and check_fault:
            raise GripperFault(fault)
        position = self.get_var('POS')
        return GripperState(width_m=count_to_width(position, self.closed_count),
                            position=position, requested=self.get_var('PRE'),
                            obj=self.get_var('OBJ'), fault=fault, status=status,
                            active=status == 3)

    def activate(self, timeout_s: float = 5.0, reset_fault: bool = False) -> bool:
        """
        Activate the gripper: reset (ACT 0), then ACT 1, and wait for STA 3.

        An active gripper is left alone (a reset would open it and drop what it holds).

        :param timeout_s: time allowed for the reset and the activation (s).
        :param reset_fault: reset and reactivate an active gripper that reports a fault.
        :return: whether it was (re)activated.
        :raises GripperFault: when it reports a fault (active, or during the activation).
        """
        if self.get_var('STA') == 3 and self.get_var('ACT') == 1:
            fault = self.get_var('FLT')
            if fault and not reset_fault:
                raise GripperFault(fault)
            if not fault:
                return False
        deadline = time.monotonic() + timeout_s
        self.set_vars(ACT=0, ATR=0)
        while self.get_var('ACT') != 0 or self.get_var('STA') != 0:
            self._before(deadline, 'SET ACT 0 ATR 0', 'ACT 0 and STA 0')
        self.set_vars(ACT=1)
        while True:
            self._check_fault()
            if self.get_var('STA') == 3:
                return True
            self._before(deadline, 'SET ACT 1', 'STA 3')

    def _check_fault(self) -> None:
        fault = self.get_var('FLT')
        if fault:
            raise GripperFault(fault)

    def _before(self, deadline: float, request: str, want: str) -> None:
        """Sleep one poll period, or raise when ``deadline`` has passed."""
        if time.monotonic() > deadline:
            raise GripperLinkError(f'gripper {self.host}:{self.port}: asked {request!r}, '
                                   f'no {want} in time (STA {self.get_var("STA")})')
        time.sleep(_POLL_S)

    def move(self, width_m: float, speed_mps: float = 0.1,
             force_n: float = 100.0) -> MoveCommand:
        """
        Start a move to ``width_m`` (one ``SET POS SPE FOR GTO``); does not wait for it.

        Out-of-range arguments are clipped to the 2F-85's ranges and named in the result.
        Follow the motion with :meth:`state`: OBJ 3 arrived, OBJ 2 holding an object.
        """
        position, c_width = width_to_count(width_m, self.closed_count)
        speed, c_speed = speed_to_byte(speed_mps)
        force, c_force = force_to_byte(force_n)
        self.set_vars(POS=position, SPE=speed, FOR=force, GTO=1)
        clipped = tuple(n for n, c in (('width_m', c_width), ('speed_mps', c_speed),
                                       ('force_n', c_force)) if c)
        return MoveCommand(position, speed, force, count_to_width(position, self.closed_count),
                           clipped)


def check_gripper(host: str, port: int = PORT, timeout_s: float = 2.0) -> tuple[str, str]:
    """
    Read-only preflight of the gripper: ``(status, detail)``, status PASS, WARN or FAIL.

    Never activates or moves it. FAIL when it does not answer, is faulted or is not
    activated; WARN when it already holds an object.
    """
    try:
        with RobotiqGripper(host, port, timeout_s) as gripper:
            state = gripper.state(check_fault=False)
    except GripperLinkError as exc:
        return 'FAIL', exc.reason
    if state.fault:
        return 'FAIL', f'{GripperFault(state.fault)}: reactivate it (Robotiq toolbar)'
    if not state.active:
        return 'FAIL', (f'not activated (STA {state.status}): activate it on the teach '
                        'pendant (Robotiq toolbar)')
    detail = f'active, {1000 * state.width_m:.1f} mm open (POS {state.position})'
    if state.holding:
        return 'WARN', detail + ': holding an object'
    return 'PASS', detail
