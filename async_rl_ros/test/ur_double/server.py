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
The sockets of the controller double: RTDE (30004), dashboard (29999), script (30002/30003).

Plus the Robotiq gripper's URCap socket (63352, :mod:`ur_double.gripper`) and a test-only
control port (29990, line commands answered with one JSON line) for fault injection and
inspection. Run it in its own process (see :mod:`ur_double.harness`): the
ur_rtde constructors hold the GIL while they wait for the controller.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import struct
import threading
import time

import numpy as np
from ur_double.controller import Controller, ROBOT_MODE, RUNTIME
from ur_double.gripper import GripperDouble
from ur_double.protocol import default_value, pack, PKG, recipe_struct, var_type

__all__ = ['DoubleServer', 'PORTS', 'CONTROL_PORT']

#: speedJ and servoJ command ids of ur_rtde's control script.
MOTION_COMMANDS = (9, 11)
PORTS = {'rtde': 30004, 'dashboard': 29999, 'script_secondary': 30002, 'script': 30003,
         'gripper': 63352}   # the Robotiq URCap's socket (ur_double.gripper)
CONTROL_PORT = 29990
MAX_BACKLOG_S = 0.5  # s of missed controller cycles run late; a longer backlog is skipped
_LOG = logging.getLogger('ur_double')
_REG_INT = re.compile(rb'reg_offset_int\s*=\s*(\d+)')
_REG_FLOAT = re.compile(rb'reg_offset_float\s*=\s*(\d+)')
_END = re.compile(rb'^end[ \t]*\r?$', re.M)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b''
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError('closed')
        data += chunk
    return data


class _RTDESession:
    """One RTDE client connection: recipes and the started flag."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.send_lock = threading.Lock()
        self.output_names: list[str] = []
        self.output_struct: struct.Struct | None = None
        self.output_id = 0
        self.defaults: list[object] = []
        self.period = 1.0 / 125.0
        self.next_due = 0.0
        self.inputs: dict[int, tuple[list[str], struct.Struct]] = {}
        self.started = False

    def send(self, data: bytes) -> None:
        with self.send_lock:
            self.sock.sendall(data)


class DoubleServer:
    """
    Serve one :class:`Controller` on ``ip``.

    :param ip: loopback address to bind (127.0.0.N).
    :param controller: the simulated arm; a default e-Series UR5 when omitted.
    :param frequency: largest RTDE output rate (Hz); 500 for e-Series, 125 for CB3.
    """

    def __init__(self, ip: str, controller: Controller | None = None,
                 frequency: float | None = None):
        self.ip = ip
        self.ctrl = controller or Controller()
        self.frequency = frequency or self.ctrl.frequency
        self.ctrl.frequency = self.frequency
        self.serial = '20235500001'
        self.slow_s = 0.0           # delay added to every dashboard and setup reply
        self.frozen_until = 0.0     # no data packages before this monotonic time
        self.frozen_from = 0.0
        self.freeze_grace = 0.0     # s after a freeze starts when motion commands still count
        self.motion_writes_frozen = 0  # speedJ/servoJ writes received while frozen (after grace)
        self.down_until = 0.0       # listeners closed (link down) before this time
        self.stalled_until = 0.0    # link stalled (nothing flows either way) before this time
        self.stop_event = threading.Event()
        self._listeners: dict[str, socket.socket] = {}
        self._clients: set[socket.socket] = set()
        self._clients_lock = threading.Lock()
        self._sessions: list[_RTDESession] = []
        self._threads: list[threading.Thread] = []
        self.packages_sent = 0
        self.gripper = GripperDouble(self._wait_stall)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Bind every port and start the controller loop."""
        self._bind_all()
        control = self._listen(CONTROL_PORT)
        self._spawn(self._accept_loop, control, self._control_client, False)
        self._spawn(self._cycle_loop)

    def _bind_all(self) -> None:
        handlers = {'rtde': self._rtde_client, 'dashboard': self._dashboard_client,
                    'script_secondary': self._script_client, 'script': self._script_client,
                    'gripper': self.gripper.client}
        for name, port in PORTS.items():
            sock = self._listen(port)
            self._listeners[name] = sock
            self._spawn(self._accept_loop, sock, handlers[name], True)

    def _listen(self, port: int) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.ip, port))
        sock.listen(8)
        sock.settimeout(0.2)
        return sock

    def _spawn(self, target, *args) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
        self._threads.append(thread)

    def close(self) -> None:
        """Stop serving."""
        self.stop_event.set()
        self._drop_clients()
        for sock in self._listeners.values():
            sock.close()

    def _accept_loop(self, listener: socket.socket, handler, tracked: bool) -> None:
        while not self.stop_event.is_set():
            try:
                sock, _ = listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return  # listener closed (link drop or shutdown)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(None)
            if tracked:
                with self._clients_lock:
                    self._clients.add(sock)
            self._spawn(self._serve, sock, handler, tracked)

    def _serve(self, sock: socket.socket, handler, tracked: bool) -> None:
        try:
            handler(sock)
        except (ConnectionError, OSError):
            pass
        except (struct.error, ValueError, KeyError, UnicodeDecodeError) as exc:
            _LOG.error('%s client closed after a protocol error: %r', handler.__name__, exc)
        finally:
            if tracked:
                with self._clients_lock:
                    self._clients.discard(sock)
            try:
                sock.close()
            except OSError:
                pass

    def _drop_clients(self) -> None:
        with self._clients_lock:
            clients, self._clients = list(self._clients), set()
        for sock in clients:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    # ------------------------------------------------------------------ faults
    def drop_link(self, down_s: float) -> None:
        """Close every connection and refuse new ones for ``down_s`` seconds."""
        self.down_until = time.monotonic() + down_s
        for sock in self._listeners.values():
            sock.close()
        self._listeners.clear()
        self._drop_clients()
        self._spawn(self._relisten)

    def _relisten(self) -> None:
        while time.monotonic() < self.down_until and not self.stop_event.is_set():
            time.sleep(0.02)
        if not self.stop_event.is_set():
            self._bind_all()

    def stall_link(self, stall_s: float) -> None:
        """
        Stall the link for ``stall_s`` seconds: the connections stay open, nothing flows.

        Like a pulled cable that is plugged back in: no data packages and no answers go out,
        and what the clients send arrives only when the stall ends (TCP retransmits it).
        """
        self.stalled_until = time.monotonic() + stall_s
        self.frozen_from = time.monotonic()
        self.freeze_grace = 0.0
        self.frozen_until = self.stalled_until

    def _wait_stall(self) -> None:
        while (left := self.stalled_until - time.monotonic()) > 0.0:
            time.sleep(min(left, 0.02))

    def _pause(self) -> None:
        self._wait_stall()
        if self.slow_s > 0.0:
            time.sleep(self.slow_s)

    # ------------------------------------------------------------------ controller loop
    def _cycle_loop(self) -> None:
        # A real controller never skips a cycle. When this process was not scheduled (a busy
        # machine), the cycles it missed run at once, each at its own slot: the clients get
        # every packet, late, with the stamps a real controller gives them. Only a backlog
        # longer than MAX_BACKLOG_S (the process was stopped) is skipped.
        period = 1.0 / self.frequency
        due = time.monotonic()
        while not self.stop_event.is_set():
            self.ctrl.tick(due)
            if time.monotonic() >= self.frozen_until:
                self._publish(due)
            due += period
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            elif -delay > MAX_BACKLOG_S:
                due = time.monotonic()

    def _publish(self, due: float) -> None:
        sessions = [s for s in self._sessions if s.started and s.output_struct is not None]
        if not sessions:
            return
        values = self.ctrl.outputs()
        for session in sessions:
            if due + 1e-4 < session.next_due:
                continue
            session.next_due = max(session.next_due + session.period, due)
            flat: list[object] = [session.output_id]
            for name, default in zip(session.output_names, session.defaults):
                value = values.get(name, default)
                if isinstance(value, list):
                    flat.extend(value)
                else:
                    flat.append(value)
            try:
                session.send(pack(PKG['DATA_PACKAGE'], session.output_struct.pack(*flat)))
                self.packages_sent += 1
            except (OSError, struct.error) as exc:
                _LOG.debug('data package not sent: %s', exc)
                session.started = False

    # ------------------------------------------------------------------ RTDE
    def _rtde_client(self, sock: socket.socket) -> None:
        session = _RTDESession(sock)
        self._sessions.append(session)
        try:
            while not self.stop_event.is_set():
                size, kind = struct.unpack('>HB', _recv_exact(sock, 3))
                payload = _recv_exact(sock, size - 3)
                self._wait_stall()
                self._rtde_package(session, kind, payload)
        finally:
            session.started = False
            self._sessions.remove(session)

    def _rtde_package(self, s: _RTDESession, kind: int, payload: bytes) -> None:
        ctrl = self.ctrl
        if kind == PKG['DATA_PACKAGE']:
            recipe = s.inputs.get(payload[0])
            if recipe is not None:
                names, st = recipe
                if len(payload) != st.size:
                    _LOG.error('input recipe %d %s: %d bytes, expected %d', payload[0], names,
                               len(payload), st.size)
                    return
                values = dict(zip(names, st.unpack(payload)[1:]))
                now = time.monotonic()
                if self.frozen_from + self.freeze_grace < now < self.frozen_until and \
                        values.get('input_int_register_0') in MOTION_COMMANDS:
                    self.motion_writes_frozen += 1
                ctrl.write_inputs(values)
            return
        self._pause()
        if kind == PKG['REQUEST_PROTOCOL_VERSION']:
            (version,) = struct.unpack('>H', payload[:2])
            s.send(pack(kind, struct.pack('>B', 1 if version in (1, 2) else 0)))
        elif kind == PKG['GET_URCONTROL_VERSION']:
            s.send(pack(kind, struct.pack('>IIII', *ctrl.version)))
        elif kind == PKG['SETUP_OUTPUTS']:
            (frequency,) = struct.unpack('>d', payload[:8])
            names = [n for n in payload[8:].decode().split(',') if n]
            s.output_names = names
            s.output_struct = recipe_struct(names)
            s.defaults = [default_value(n) for n in names]
            s.output_id = 1
            s.period = 1.0 / min(max(frequency, 1.0), self.frequency)
            types = ','.join(var_type(n) for n in names)
            s.send(pack(kind, struct.pack('>B', s.output_id) + types.encode()))
        elif kind == PKG['SETUP_INPUTS']:
            names = [n for n in payload.decode().split(',') if n]
            recipe_id = len(s.inputs) + 1
            s.inputs[recipe_id] = (names, recipe_struct(names))
            types = ','.join(var_type(n) for n in names)
            s.send(pack(kind, struct.pack('>B', recipe_id) + types.encode()))
        elif kind == PKG['START']:
            s.next_due = time.monotonic()
            s.started = True
            s.send(pack(kind, b'\x01'))
        elif kind == PKG['PAUSE']:
            s.started = False
            s.send(pack(kind, b'\x01'))
        elif kind == PKG['TEXT_MESSAGE']:
            pass
        else:
            _LOG.warning('unknown RTDE package %r', kind)

    # ------------------------------------------------------------------ script port
    def _script_client(self, sock: socket.socket) -> None:
        buffer = b''
        while not self.stop_event.is_set():
            chunk = sock.recv(65536)
            if not chunk:
                return
            buffer += chunk
            while True:
                end = _END.search(buffer)
                if end is None:
                    break
                script, buffer = buffer[:end.end()], buffer[end.end():].lstrip(b'\r\n')
                self._run_script(script)

    def _run_script(self, script: bytes) -> None:
        self._wait_stall()
        if b'def ' not in script:
            return
        reg_int = _REG_INT.search(script)
        reg_float = _REG_FLOAT.search(script)
        self.ctrl.upload(script.decode(errors='replace'),
                         int(reg_int.group(1)) if reg_int else 0,
                         int(reg_float.group(1)) if reg_float else 0)

    # ------------------------------------------------------------------ dashboard
    def _dashboard_client(self, sock: socket.socket) -> None:
        sock.sendall(b'Connected: Universal Robots Dashboard Server\n')
        reader = sock.makefile('rb')
        for raw in reader:
            if self.stop_event.is_set():
                return
            command = raw.decode(errors='replace').strip()
            if not command:
                continue
            self._pause()
            answer = self._dashboard_answer(command)
            sock.sendall(answer.encode() + b'\n')
            if command == 'quit':
                return

    def _dashboard_answer(self, command: str) -> str:
        ctrl = self.ctrl
        major, minor, bugfix, build = ctrl.version
        lower = command.lower()
        running = ctrl.runtime == RUNTIME['PLAYING']
        if lower == 'polyscopeversion':
            return f'URSoftware {major}.{minor}.{bugfix}.{build} (Nov 29 2026)'
        if lower == 'get serial number':
            return self.serial
        if lower == 'get robot model':
            return 'UR5'
        if lower == 'is in remote control':
            return 'true' if ctrl.remote_control else 'false'
        if lower == 'robotmode':
            names = {v: k for k, v in ROBOT_MODE.items()}
            return f'Robotmode: {names.get(ctrl.robot_mode, ctrl.robot_mode)}'
        if lower == 'safetymode':
            return f'Safetymode: {ctrl.safety}'
        if lower == 'safetystatus':
            return f'Safetystatus: {ctrl.safety}'
        if lower == 'programstate':
            return 'PLAYING rtde_control' if running else 'STOPPED <unnamed>'
        if lower == 'running':
            return f'Program running: {str(running).lower()}'
        if lower == 'unlock protective stop':
            return ctrl.unlock_protective_stop()
        if lower == 'close safety popup':
            return 'closing safety popup'
        if lower == 'close popup':
            return 'closing popup'
        if lower == 'stop':
            with ctrl.lock:
                ctrl._halt_program('STOPPED')
            return 'Stopped'
        if lower == 'power on':
            ctrl.power_on(release_brakes=False)
            return 'Powering on'
        if lower == 'brake release':
            ctrl.power_on(release_brakes=True)
            return 'Brake releasing'
        if lower == 'restart safety':
            return 'Restarting safety'
        if lower == 'get loaded program':
            return 'No program loaded'
        if lower == 'isprogramsaved':
            return 'true <unnamed>'
        if lower == 'quit':
            return 'Disconnected'
        if lower.startswith('popup') or lower.startswith('addtolog'):
            return 'showing popup' if lower.startswith('popup') else 'Added log message'
        return f"could not understand: '{command}'"

    # ------------------------------------------------------------------ test control
    def _control_client(self, sock: socket.socket) -> None:
        reader = sock.makefile('rb')
        for raw in reader:
            words = raw.decode().split()
            if not words:
                continue
            try:
                reply = self._control(words[0], words[1:])
            except (ValueError, IndexError) as exc:
                reply = {'error': str(exc)}
            sock.sendall(json.dumps(reply).encode() + b'\n')

    def _control(self, verb: str, args: list[str]) -> dict[str, object]:
        ctrl = self.ctrl
        if verb == 'state':
            state = ctrl.snapshot()
            state['packages_sent'] = self.packages_sent
            state['motion_writes_frozen'] = self.motion_writes_frozen
            return state
        if verb == 'protective_stop':   # 'protective_stop keep': the program keeps running
            ctrl.protective_stop(keep_program=bool(args) and args[0] == 'keep')
        elif verb == 'refuse_script':    # the next N uploaded scripts do not start
            ctrl.refuse_uploads = int(args[0]) if args else 1
        elif verb == 'estop':
            ctrl.emergency_stop()
        elif verb == 'power_off':
            ctrl.power_off()
        elif verb == 'ignore_stops':
            ctrl.ignore_stops = args[0] == 'true' if args else True
        elif verb == 'release_estop':
            ctrl.release_emergency_stop()
        elif verb == 'drop':
            self.drop_link(float(args[0]))
        elif verb == 'stall':
            self.stall_link(float(args[0]))
        elif verb == 'freeze':
            self.frozen_from = time.monotonic()
            self.freeze_grace = float(args[1]) if len(args) > 1 else 0.0
            self.frozen_until = self.frozen_from + float(args[0])
        elif verb == 'slow':
            self.slow_s = float(args[0])
        elif verb == 'remote':
            ctrl.remote_control = args[0] == 'true'
        elif verb == 'set_q':
            with ctrl.lock:
                ctrl.q = np.array([float(x) for x in args[:6]])
                ctrl.qd[:] = 0.0
        elif verb.startswith('gripper'):
            return self.gripper.control(verb, args)
        elif verb == 'reset_stats':
            with ctrl.lock:
                ctrl.max_speed = 0.0
                ctrl.moved_while_stopped = 0.0
        else:
            raise ValueError(f'unknown control verb {verb!r}')
        return {'ok': True}
