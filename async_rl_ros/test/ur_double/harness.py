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
Start the double in a subprocess and drive its fault-injection port from a test.

Each double gets a loopback address of its own, drawn at random from 127.0.0.0/8 among those
on which every port it needs binds (:func:`free_address`): a second checkout's test run or a
double started by hand never collides with a test.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import select
import socket
import subprocess
import sys
import threading
import time

from ur_double.server import CONTROL_PORT, PORTS

__all__ = ['DoubleProcess', 'free_address']

_TEST_DIR = pathlib.Path(__file__).resolve().parents[1]
_START_TRIES = 5   # a free address taken by another process in the meantime: draw again


def _binds(ip: str) -> bool:
    """Whether every port of the double (and its control port) can listen on ``ip``."""
    socks = []
    try:
        for port in (CONTROL_PORT, *PORTS.values()):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((ip, port))
            sock.listen(1)
        return True
    except OSError:
        return False
    finally:
        for sock in socks:
            sock.close()


def free_address(tries: int = 200) -> str:
    """
    Return a loopback address on which nothing listens on any port the double needs.

    Drawn at random from 127.1.0.1-127.254.255.254 (so that two test runs at once rarely
    even try the same one), checked by binding every port.
    """
    rng = random.Random(os.getpid() * 1_000_003 + time.monotonic_ns())
    for _ in range(tries):
        ip = f'127.{rng.randint(1, 254)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}'
        if _binds(ip):
            return ip
    raise RuntimeError(f'no loopback address with ports {CONTROL_PORT}, '
                       f'{", ".join(map(str, PORTS.values()))} free after {tries} draws')


class DoubleProcess:
    """
    A running ``python -m ur_double`` with a proxy for its control port.

    :param ip: loopback address; a free one (:func:`free_address`) when omitted.
    :param series: ``'e'`` (5.x, 500 Hz) or ``'cb3'`` (3.x, 125 Hz).
    :param cooldown: seconds a protective stop lasts before it can be unlocked.
    :param not_remote: report local control on the dashboard.
    """

    def __init__(self, ip: str | None = None, series: str = 'e', cooldown: float = 5.0,
                 not_remote: bool = False):
        self._sock: socket.socket | None = None
        for attempt in range(1 if ip else _START_TRIES):
            self.ip = ip or free_address()
            args = [sys.executable, '-m', 'ur_double', '--ip', self.ip, '--series', series,
                    '--cooldown', str(cooldown), '--parent-pid', str(os.getpid())]
            if not_remote:
                args.append('--not-remote')
            env = dict(os.environ)
            env['PYTHONPATH'] = os.pathsep.join([str(_TEST_DIR), env.get('PYTHONPATH', '')])
            self.proc = subprocess.Popen(args, cwd=_TEST_DIR, env=env, stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, text=True)
            try:
                self._wait_ready()
                return
            except RuntimeError:
                self.close()
                if ip or attempt == _START_TRIES - 1:
                    raise
            except BaseException:
                self.close()
                raise

    def _wait_ready(self, timeout: float = 20.0) -> None:
        """Wait for the 'listening' line of this very process, then for its ports."""
        deadline = time.monotonic() + timeout
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ''
        if 'listening' not in line:
            # A bind error (e.g. a double left over on this address) ends the process.
            rest = self.proc.stdout.read() if self.proc.poll() is not None else ''
            raise RuntimeError(f'the double on {self.ip} did not start: {line}{rest}')
        self.output = [line]
        threading.Thread(target=self._drain, daemon=True).start()
        for port in (CONTROL_PORT, *PORTS.values()):
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError('the double exited: ' + (self.proc.stdout.read() or ''))
                try:
                    socket.create_connection((self.ip, port), timeout=0.5).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f'the double does not listen on {self.ip}:{port}')
                    time.sleep(0.05)

    def _drain(self) -> None:
        """Keep reading the double's output so that a full pipe never blocks it."""
        for line in self.proc.stdout:
            self.output = (self.output + [line])[-200:]

    def call(self, *words: object) -> dict:
        """Send one control command and return its JSON answer."""
        if self._sock is None:
            self._sock = socket.create_connection((self.ip, CONTROL_PORT), timeout=10.0)
            self._reader = self._sock.makefile('rb')
        self._sock.sendall(' '.join(str(w) for w in words).encode() + b'\n')
        return json.loads(self._reader.readline())

    def state(self) -> dict:
        """Return the controller's snapshot (joints, modes, counters)."""
        return self.call('state')

    def wait_for(self, predicate, timeout: float = 10.0, poll: float = 0.02) -> dict:
        """Poll the state until ``predicate(state)`` holds; return that state."""
        deadline = time.monotonic() + timeout
        while True:
            state = self.state()
            if predicate(state):
                return state
            if time.monotonic() > deadline:
                raise AssertionError(f'condition not met within {timeout} s; state {state}')
            time.sleep(poll)

    def close(self) -> None:
        """Stop the subprocess."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
