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
The worker's side of the ur_rtde client process (:mod:`async_rl_ros.envs.rtde_child`).

A native fault of the robot client (ur_rtde 1.6.5 crashes with SIGSEGV after a link stall of
a few seconds) must not take the worker down. :class:`ClientProcess` starts the clients in a
child process and forwards each request over a socket pair with a deadline. The child's death
(crash or exit), a broken pipe or a reply later than the deadline raise :class:`LinkLost`
(a ``RuntimeError``, which the supervisor reads as a lost link); the child is then killed,
and the supervisor starts a fresh one when it reconnects. The child dies with the worker.
"""

from __future__ import annotations

import logging
from multiprocessing.connection import Connection
import os
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any
import weakref

__all__ = ['ClientProcess', 'LinkLost']

_LOG = logging.getLogger(__name__)
_CHILD = pathlib.Path(__file__).with_name('rtde_child.py')
_START_TIMEOUT = 30.0  # s: Python start and the ur_rtde import of the child


class LinkLost(RuntimeError):
    """The client process died, broke the pipe or did not answer in time."""


def _describe(code: int | None) -> str:
    if code is None:
        return 'still running'
    if code < 0:
        try:
            return f'killed by {signal.Signals(-code).name}'
        except ValueError:
            return f'killed by signal {-code}'
    return f'exit status {code}'


def _kill(proc: subprocess.Popen, owner: int) -> None:
    if os.getpid() != owner:
        return   # a forked copy of the worker exits: the client is not its own
    if proc.poll() is None:
        proc.kill()
    try:
        proc.wait(timeout=5.0)
    except subprocess.TimeoutExpired:
        pass


class ClientProcess:
    """
    The ur_rtde clients for the controller at ``ip``, in a child process.

    :param ip: controller address.
    :param frequency: RTDE rate (Hz).
    :param timeout: default deadline of one reply (s); a later reply means a lost link.
    :param priority: ``SCHED_FIFO`` priority of the child (0: normal priority);
        :attr:`priority_refused` says why the OS refused it (``None``: granted or not asked).
    """

    def __init__(self, ip: str, frequency: float, timeout: float, priority: int = 0):
        self.ip = ip
        self.frequency = float(frequency)
        self.timeout = float(timeout)
        self.calls = 0
        self._pending = 0              # requests whose reply was not read (interrupted wait)
        self.lost: str | None = None   #: why the link was lost (None while it is up)
        self._lock = threading.Lock()
        parent, child = socket.socketpair()
        main = threading.current_thread() is threading.main_thread()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, '-u', str(_CHILD), '--fd', str(child.fileno()),
                 '--parent-pid', str(os.getpid()), '--pdeathsig', 'kill' if main else 'term',
                 '--ip', ip, '--frequency', repr(self.frequency),
                 '--priority', str(int(priority))],
                pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL, stdout=2,
                close_fds=True, start_new_session=True)  # Ctrl-C is for the worker alone
        finally:
            child.close()
        self._conn = Connection(parent.detach())
        self._finalizer = weakref.finalize(self, _kill, self.proc, os.getpid())
        self.pid, self.priority_refused = self._receive(_START_TIMEOUT, 'start')

    # ------------------------------------------------------------------ requests
    def request(self, op: str, *args: Any, timeout: float | None = None) -> Any:
        """
        Run ``op`` in the child and return its value.

        :raises LinkLost: the child is dead, the pipe broke or no answer within ``timeout``
            (default: the link's timeout); the child is killed.
        :raises RuntimeError: the ur_rtde client raised (the message is kept).
        """
        with self._lock:
            if self.lost is not None:
                raise LinkLost(self.lost)
            while self._pending:   # a reply left behind by an interrupted request (Ctrl-C)
                self._receive(self.timeout, 'an interrupted request', check=False)
            try:
                self._conn.send((op, args))
            except (OSError, ValueError):
                self._fail(f'the ur_rtde client process is gone ({self._exit()})')
            self.calls += 1
            self._pending += 1
            label = f'{args[0]}.{args[1]}' if op == 'call' else op
            return self._receive(self.timeout if timeout is None else timeout, label)

    def call(self, target: str, method: str, *args: Any, timeout: float | None = None) -> Any:
        """Call ``method`` of the child's ``dashboard``, ``receive`` or ``control`` client."""
        return self.request('call', target, method, args, timeout=timeout)

    def _receive(self, timeout: float, op: str, check: bool = True) -> Any:
        try:
            ready = self._conn.poll(timeout)
            reply = self._conn.recv() if ready else None
        except (EOFError, OSError):
            self._fail(f'the ur_rtde client process died ({self._exit()}) during {op}')
        if reply is None:
            self._fail(f'the ur_rtde client process did not answer {op} within {timeout:g} s')
        self._pending = max(0, self._pending - 1)
        if reply[0] == 'ok' or not check:
            return reply[1]
        kind, message = reply[1], reply[2]
        if kind == 'ImportError':
            self._fail(f'the ur_rtde client process cannot import ur_rtde ({message}): pip '
                       'install ur-rtde==1.6.5')
        raise RuntimeError(message)

    def _exit(self) -> str:
        try:
            self.proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass
        return _describe(self.proc.poll())

    def _fail(self, why: str) -> None:
        self.lost = why
        _LOG.warning('%s', why)
        self.kill()
        raise LinkLost(why)

    # ------------------------------------------------------------------ lifecycle
    def alive(self) -> bool:
        """Whether the child runs and the link was not given up."""
        return self.lost is None and self.proc.poll() is None

    def kill(self) -> None:
        """End the child at once (its sockets close; the controller's watchdog stops the arm)."""
        self._finalizer()
        self._conn.close()

    def close(self, timeout: float = 2.0) -> None:
        """Disconnect the clients in the child, then end it; safe to call twice."""
        if self.alive():
            with self._lock:
                try:
                    self._conn.send(('close', ()))
                    if self._conn.poll(timeout):
                        self._conn.recv()
                    deadline = time.monotonic() + timeout
                    while self.proc.poll() is None and time.monotonic() < deadline:
                        time.sleep(0.01)
                except (EOFError, OSError, ValueError):
                    pass
        self.lost = self.lost or 'closed'
        self.kill()
