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
Run the UR controller double: ``python -m ur_double --ip 127.0.0.5`` (from ``test/``).

Then point ur_rtde, ``async-rl-preflight --robot-ip 127.0.0.5`` or the ur5 backend at it.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading

from ur_double.controller import Controller
from ur_double.server import DoubleServer


def main(argv: list[str] | None = None) -> None:
    """Serve until SIGINT/SIGTERM."""
    parser = argparse.ArgumentParser(prog='ur_double', description=__doc__)
    parser.add_argument('--ip', default='127.0.0.5', help='loopback address to bind')
    parser.add_argument('--series', choices=('e', 'cb3'), default='e',
                        help='e-Series (5.x, 500 Hz) or CB3 (3.x, 125 Hz)')
    parser.add_argument('--cooldown', type=float, default=5.0,
                        help='seconds before a protective stop can be unlocked')
    parser.add_argument('--not-remote', action='store_true',
                        help='report local control (the preflight must fail)')
    parser.add_argument('--parent-pid', type=int, default=0,
                        help='exit when this process is gone (set by the test harness)')
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format='ur_double %(levelname)s %(message)s')
    version = (5, 15, 1, 0) if args.series == 'e' else (3, 15, 7, 0)
    ctrl = Controller(version=version, cooldown_s=args.cooldown)
    ctrl.remote_control = not args.not_remote
    server = DoubleServer(args.ip, ctrl)
    server.start()
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    print(f'ur_double listening on {args.ip} (controller {".".join(map(str, version))}, '
          f'{server.frequency:g} Hz)', flush=True)
    while not done.wait(0.5):
        if args.parent_pid and os.getppid() != args.parent_pid:
            break  # the test process died without stopping us: do not linger on the address
    server.close()


if __name__ == '__main__':
    main()
