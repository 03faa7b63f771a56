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
The ur_rtde client process: runs the native RTDE clients apart from the worker.

ur_rtde 1.6.5 can crash natively (SIGSEGV in its internal reconnect loop after a link stall
of a few seconds). Its clients therefore live in this small process, started by
:class:`async_rl_ros.envs.rtde_link.ClientProcess` as ``python rtde_child.py --fd N
--parent-pid P``; the worker survives the crash and reads it as a lost link.

Protocol on the inherited socket (a :class:`multiprocessing.connection.Connection`): the
parent sends ``(op, args)`` and receives ``('ok', value)`` or ``('err', type, message)``.
Operations: ``dashboard`` (connect; returns the PolyScope version), ``receive``, ``control``
and ``io`` (construct the interfaces; ``io`` sets digital outputs), ``state`` (one sample of
everything the supervisor reads, all from one RTDE packet), ``call`` (any method of
``dashboard``, ``receive``, ``control`` or ``io``), ``command`` (a motion command, sent only
while the controller runs and its state is fresh; returns the command's result and the
sample it was judged on), ``wait`` (sleep until a monotonic deadline; returns a sample),
``close``.

With ``--priority P`` the process takes ``SCHED_FIFO`` priority P before the clients start
(their threads inherit it; ur_rtde's own ``rt_priority`` gets P too); where the OS refuses,
the start reply says why and ur_rtde is told not to try (``rt_priority`` -1).

The process ends when the parent goes: the pipe reaches its end, ``PR_SET_PDEATHSIG``
delivers a signal, or a thread polling ``getppid`` sees the parent gone. This module imports
only the standard library (and ur_rtde inside :func:`main`).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import sys
import threading
import time
from typing import Any

__all__ = ['Clients', 'main']

_PR_SET_PDEATHSIG = 1
_SNAPSHOT_TRIES = 200  # reads of a sample before the last one is taken as it is


class Clients:
    """The ur_rtde clients of one connection to one controller."""

    def __init__(self, ip: str, frequency: float, rt_priority: int = -1):
        import dashboard_client
        import rtde_control
        import rtde_receive
        self.modules = (dashboard_client, rtde_receive, rtde_control)
        self.ip = ip
        self.frequency = frequency
        self.rt_priority = int(rt_priority)
        self.dashboard: Any = None
        self.receive: Any = None
        self.control: Any = None
        self.io: Any = None

    def handle(self, op: str, args: tuple) -> Any:
        """Run one operation; exceptions go back to the parent."""
        if op == 'state':
            return self.state()
        if op == 'call':
            target, method, call_args = args
            client = getattr(self, target)
            if client is None:
                raise RuntimeError(f'the {target} client is not connected')
            return getattr(client, method)(*call_args)
        if op == 'command':
            return self.command(*args)
        if op == 'wait':
            return self.wait(*args)
        if op == 'dashboard':
            self.dashboard = self.modules[0].DashboardClient(self.ip)
            self.dashboard.connect()
            return self.dashboard.polyscopeVersion()
        if op == 'receive':
            self.receive = self.modules[1].RTDEReceiveInterface(
                self.ip, self.frequency, [], False, False, self.rt_priority)
            return True
        if op == 'control':
            control = self.modules[2]
            self.control = control.RTDEControlInterface(
                self.ip, self.frequency, control.RTDEControlInterface.FLAG_UPLOAD_SCRIPT,
                50002, self.rt_priority)
            return True
        if op == 'io':
            import rtde_io
            self.io = rtde_io.RTDEIOInterface(self.ip)
            return True
        raise ValueError(f'unknown operation {op!r}')

    def state(self) -> tuple:
        """
        Return one sample of everything the supervisor reads, all from one RTDE packet.

        The tuple holds: receive connected, control connected, timestamp, q, qd, TCP pose,
        safety status bits, runtime state, robot mode. ur_rtde updates a packet's values
        together but reads them one by one: the reads are repeated until the timestamp before
        and after them is the same (no packet landed in between).
        """
        r, c = self.receive, self.control
        if r is None or not r.isConnected():
            return (False, False, 0.0, [], [], [], 0, 0, -1)
        stamp = r.getTimestamp()
        for _ in range(_SNAPSHOT_TRIES):
            values = (r.getActualQ(), r.getActualQd(), r.getActualTCPPose(),
                      r.getSafetyStatusBits(), r.getRuntimeState(), r.getRobotMode())
            after = r.getTimestamp()
            if after == stamp:
                break
            stamp = after
            # A packet landed mid-read, mostly because this process was preempted (a busy
            # machine: five tries were not enough there); give the CPU up before reading again.
            time.sleep(0)
        return (True, c is not None and c.isConnected(), stamp, *values)

    def command(self, method: str, args: list, offset: float | None, max_age: float,
                halt_mask: int) -> tuple[Any, tuple]:
        """
        Send ``control.method(*args)`` if the newest sample allows it; return (result, sample).

        It is sent only while both interfaces are connected, the program runs, the arm is
        powered (robot mode 7), no bit of ``halt_mask`` is set in the safety status and the
        sample is at most ``max_age`` s old (from the parent's clock ``offset``, local minus
        controller time; ``None``: not judged). The result is ``None`` when it was not sent.
        """
        sample = self.state()
        ok, c_ok, stamp, _, _, _, bits, runtime, mode = sample
        fresh = offset is None or time.monotonic() - offset - stamp <= max_age
        if not (ok and c_ok and fresh and runtime == 2 and mode == 7 and not bits & halt_mask):
            return None, sample
        return getattr(self.control, method)(*args), sample

    def wait(self, deadline: float) -> tuple:
        """Sleep until ``deadline`` (monotonic s); return the sample read then."""
        left = deadline - time.monotonic()
        if left > 0.0:
            time.sleep(left)
        return self.state()

    def close(self) -> None:
        """Disconnect every client (errors ignored: the process ends next)."""
        for client in (self.io, self.control, self.receive, self.dashboard):
            if client is not None:
                try:
                    client.disconnect()
                except RuntimeError:
                    pass


def _die_with_parent(parent_pid: int, kill: bool) -> None:
    """
    End this process when the parent is gone.

    ``PR_SET_PDEATHSIG`` fires when the parent *thread* that started us ends. Started from the
    main thread, that is the parent's death: SIGKILL. Started from another thread (which may
    end before the process), SIGTERM goes to a handler that checks ``getppid`` first. A
    polling thread covers the race before ``prctl`` and systems without it.
    """
    if not kill:
        def on_term(*_: object) -> None:
            if os.getppid() != parent_pid:
                os._exit(1)
        signal.signal(signal.SIGTERM, on_term)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL if kill else signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the polling thread alone

    def poll() -> None:
        while True:
            if os.getppid() != parent_pid:
                os._exit(1)
            time.sleep(0.2)

    if os.getppid() != parent_pid:
        os._exit(1)
    threading.Thread(target=poll, daemon=True).start()


def _take_priority(priority: int) -> str | None:
    """Take SCHED_FIFO ``priority`` for this process (0: none); return why not, or None."""
    if priority <= 0:
        return None
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
        return None
    except AttributeError:
        return 'real-time scheduling is not available on this OS'
    except OSError as exc:
        return f'the OS refused SCHED_FIFO priority {priority} ({exc.strerror or exc})'


def main(argv: list[str] | None = None) -> int:
    """Serve the parent's requests until it closes the pipe or asks to close."""
    from multiprocessing.connection import Connection
    parser = argparse.ArgumentParser(prog='rtde_child')
    parser.add_argument('--fd', type=int, required=True)
    parser.add_argument('--parent-pid', type=int, required=True)
    parser.add_argument('--pdeathsig', choices=('kill', 'term'), default='kill')
    parser.add_argument('--ip', required=True)
    parser.add_argument('--frequency', type=float, required=True)
    parser.add_argument('--priority', type=int, default=0)
    args = parser.parse_args(argv)
    _die_with_parent(args.parent_pid, args.pdeathsig == 'kill')
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    conn = Connection(args.fd)
    refused = _take_priority(args.priority)
    try:
        clients = Clients(args.ip, args.frequency,
                          args.priority if args.priority > 0 and not refused else -1)
    except ImportError as exc:
        conn.send(('err', 'ImportError', str(exc)))
        return 1
    conn.send(('ok', (os.getpid(), refused)))
    while True:
        try:
            op, op_args = conn.recv()
        except (EOFError, OSError):
            break
        if op == 'close':
            clients.close()
            conn.send(('ok', True))
            break
        try:
            reply = ('ok', clients.handle(op, op_args))
        except Exception as exc:  # noqa: B902 -- every client error goes back to the parent
            reply = ('err', type(exc).__name__, str(exc))
        try:
            conn.send(reply)
        except (OSError, ValueError):
            break
    clients.close()
    return 0


if __name__ == '__main__':
    sys.exit(main())
