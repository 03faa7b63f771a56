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
Preflight of a physical UR5 before training: ``async-rl-preflight --robot-ip IP``.

Read-only: it connects the dashboard and an RTDE receive interface, never uploads a program
and never moves the arm (nor the gripper: ``--gripper robotiq`` only reads the Robotiq
URCap's socket). Prints a table of checks (PASS, WARN or FAIL) and exits with 1 when
any check fails, 0 otherwise. ``train.launch.py robot:=ur5`` runs it before starting.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import socket
import statistics
import struct
import sys
import time

from async_rl_ros.core.config import ConfigError, EnvWorkerConfig, load_node_config
from async_rl_ros.envs import robotiq
from async_rl_ros.envs.rtde_probe import count_packets
from async_rl_ros.envs.rtde_supervisor import ROBOT_MODE_RUNNING, ROBOT_MODES, SAFETY_BITS

__all__ = ['Check', 'run_checks', 'format_table', 'main']

PORTS = {'dashboard': 29999, 'script': 30003, 'rtde': 30004}
SAFETY_MODES = {1: 'NORMAL', 2: 'REDUCED', 3: 'PROTECTIVE_STOP', 4: 'RECOVERY',
                5: 'SAFEGUARD_STOP', 6: 'SYSTEM_EMERGENCY_STOP', 7: 'ROBOT_EMERGENCY_STOP',
                8: 'VIOLATION', 9: 'FAULT', 10: 'VALIDATE_JOINT_ID', 11: 'UNDEFINED'}
PASS, WARN, FAIL = 'PASS', 'WARN', 'FAIL'
GRIPPERS = ('none', 'robotiq')
RATE_WINDOW_S = 1.0   # s the RTDE packets are counted over


@dataclasses.dataclass
class Check:
    """One line of the preflight table."""

    name: str
    status: str   #: PASS, WARN or FAIL
    detail: str


def _reachability(ip: str, timeout: float) -> Check:
    times, closed = [], []
    for name, port in PORTS.items():
        start = time.perf_counter()
        try:
            socket.create_connection((ip, port), timeout=timeout).close()
            times.append(time.perf_counter() - start)
        except OSError as exc:
            closed.append(f'{name} {port} ({exc.strerror or exc})')
    if closed:
        return Check('reachability', FAIL, 'not reachable: ' + ', '.join(closed) +
                     '; check the cable, the IP settings of both ends and the firewall')
    return Check('reachability', PASS, f'ports {", ".join(map(str, PORTS.values()))} open '
                 f'(connect {1000 * max(times):.1f} ms)')


def _rtde_rate(ip: str, want: float) -> Check:
    """Count the controller's packets over a window (:mod:`~async_rl_ros.envs.rtde_probe`)."""
    try:
        count = count_packets(ip, want, RATE_WINDOW_S)
    except (OSError, struct.error) as exc:
        return Check('RTDE frequency', FAIL, f'cannot count RTDE packets: {exc}')
    ok = abs(count.rate - want) <= 0.1 * want
    return Check('RTDE frequency', PASS if ok else FAIL,
                 f'{count.rate:.0f} Hz measured ({count.packets} packets over '
                 f'{count.span_s:.3f} s of controller time), {want:g} Hz requested')


def _realtime(require: bool) -> Check:
    kernel = os.path.exists('/sys/kernel/realtime')
    kind = 'PREEMPT_RT kernel' if kernel else 'no PREEMPT_RT kernel'
    try:
        before = os.sched_getscheduler(0), os.sched_getparam(0)
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        os.sched_setscheduler(0, before[0], before[1])
        return Check('real-time scheduling', PASS, f'SCHED_FIFO allowed, {kind}')
    except (AttributeError, OSError) as exc:
        status = FAIL if require else WARN
        return Check('real-time scheduling', status,
                     f'SCHED_FIFO not allowed ({getattr(exc, "strerror", exc)}), {kind}: '
                     'ur_rtde runs without real-time priority (set rtprio in '
                     '/etc/security/limits.conf or use a PREEMPT_RT kernel)')


def run_checks(ip: str, frequency: float = 500.0, max_latency_ms: float = 50.0,
               timeout: float = 2.0, require_rt: bool = False,
               gripper: str = 'none', gripper_port: int = robotiq.PORT) -> list[Check]:
    """
    Run every check against the controller at ``ip``.

    :param ip: controller address.
    :param frequency: RTDE rate the worker will use (Hz; ``rtde.frequency``).
    :param max_latency_ms: largest acceptable dashboard round trip (ms).
    :param timeout: socket timeout of the reachability probe and of the gripper (s).
    :param require_rt: fail (instead of warn) without real-time scheduling.
    :param gripper: ``'robotiq'`` adds a 'gripper' check (the URCap socket).
    :param gripper_port: the URCap socket's port (``cell.gripper_port``).
    """
    if gripper not in GRIPPERS:
        raise ValueError(f'unknown gripper {gripper!r}; one of {", ".join(GRIPPERS)}')
    checks = _controller_checks(ip, frequency, max_latency_ms, timeout)
    if gripper == 'robotiq' and checks[0].status == FAIL:
        checks.append(Check('gripper', FAIL, 'skipped: controller not reachable'))
    elif gripper == 'robotiq':
        checks.append(Check('gripper', *robotiq.check_gripper(ip, gripper_port, timeout)))
    return checks + [_realtime(require_rt)]


def _controller_checks(ip: str, frequency: float, max_latency_ms: float,
                       timeout: float) -> list[Check]:
    checks = [_reachability(ip, timeout)]
    names = ('controller version', 'RTDE frequency', 'robot mode', 'safety status',
             'program state', 'remote control', 'round-trip latency')
    if checks[0].status == FAIL:
        checks += [Check(n, FAIL, 'skipped: controller not reachable') for n in names]
        return checks
    try:
        import dashboard_client
        import rtde_receive
    except ImportError as exc:
        checks += [Check(n, FAIL, f'skipped: ur_rtde missing ({exc}); pip install '
                         'ur-rtde==1.6.5') for n in names]
        return checks
    dash = dashboard_client.DashboardClient(ip)
    receive = None
    try:
        dash.connect()
        version = dash.polyscopeVersion()
        major = int(version.split('.')[0]) if version[:1].isdigit() else 0
        series = 'e-Series' if major >= 5 else 'CB3'
        top = 500.0 if major >= 5 else 125.0
        if major < 3:
            checks.append(Check('controller version', FAIL, f'unreadable: {version!r}'))
        elif frequency > top:
            checks.append(Check('controller version', FAIL,
                                f'{version} ({series}) runs RTDE at most at {top:g} Hz: set '
                                f'rtde.frequency to {top:g}'))
        else:
            checks.append(Check('controller version', PASS, f'{version} ({series})'))
        try:
            receive = rtde_receive.RTDEReceiveInterface(ip, min(frequency, top))
            checks.append(_rtde_rate(ip, min(frequency, top)))
            mode = int(receive.getRobotMode())
            mode_name = ROBOT_MODES.get(mode, str(mode))
            running = mode == ROBOT_MODE_RUNNING
            checks.append(Check('robot mode', PASS if running else FAIL,
                                mode_name if running else
                                f'{mode_name}: power on and release the brakes first'))
            safety = int(receive.getSafetyMode())
            bits = int(receive.getSafetyStatusBits())
            on = [n for n, b in SAFETY_BITS.items() if bits >> b & 1]
            ok = safety in (1, 2)
            checks.append(Check('safety status', PASS if ok else FAIL,
                                f'{SAFETY_MODES.get(safety, safety)} ({", ".join(on) or "-"})'
                                + ('' if ok else ': clear it on the teach pendant')))
        except RuntimeError as exc:
            for n in ('RTDE frequency', 'robot mode', 'safety status'):
                checks.append(Check(n, FAIL, f'RTDE: {exc}'))
        state = dash.programState().strip()
        if state.startswith('PAUSED'):
            checks.append(Check('program state', FAIL, f'{state}: stop the paused program'))
        elif state.startswith('PLAYING'):
            checks.append(Check('program state', WARN,
                                f'{state}: ur_rtde will replace the running program'))
        else:
            checks.append(Check('program state', PASS, state))
        if major >= 5:
            remote = dash.isInRemoteControl()
            checks.append(Check('remote control', PASS if remote else FAIL,
                                'remote control' if remote else
                                'local control: switch the teach pendant to Remote Control'))
        else:
            checks.append(Check('remote control', PASS, 'not needed on a CB3'))
        rtts = []
        for _ in range(5):
            start = time.perf_counter()
            dash.robotmode()
            rtts.append(1000.0 * (time.perf_counter() - start))
        rtt = statistics.median(rtts)
        checks.append(Check('round-trip latency', PASS if rtt <= max_latency_ms else FAIL,
                            f'dashboard {rtt:.2f} ms median of 5 (limit {max_latency_ms:g} ms)'))
    except RuntimeError as exc:
        done = {c.name for c in checks}
        checks += [Check(n, FAIL, f'dashboard: {exc}') for n in names if n not in done]
    finally:
        if receive is not None:
            receive.disconnect()
        if dash.isConnected():
            dash.disconnect()
    return checks


def format_table(ip: str, checks: list[Check]) -> str:
    """Return the pass/fail table with a verdict line."""
    width = max(len(c.name) for c in checks)
    lines = [f'async-rl-preflight: UR controller at {ip}', '',
             f'{"check":<{width}}  result  detail', f'{"-" * width}  ------  ------']
    lines += [f'{c.name:<{width}}  {c.status:<6}  {c.detail}' for c in checks]
    failed = sum(c.status == FAIL for c in checks)
    warned = sum(c.status == WARN for c in checks)
    verdict = 'FAIL' if failed else 'PASS'
    lines += ['', f'RESULT: {verdict} ({len(checks)} checks, {failed} failed, {warned} '
              f'warning{"s" if warned != 1 else ""})']
    return '\n'.join(lines)


def main(argv: list[str] | None = None) -> int:
    """Console script ``async-rl-preflight``; returns (and exits with) 1 on any failure."""
    parser = argparse.ArgumentParser(prog='async-rl-preflight', description=__doc__.strip()
                                     .splitlines()[0])
    parser.add_argument('--robot-ip', required=True, help='address of the UR controller')
    parser.add_argument('--config', default=None,
                        help='parameter file whose env_worker rtde.* settings to check against')
    parser.add_argument('--frequency', type=float, default=None,
                        help='RTDE rate (Hz) the worker will use (default: rtde.frequency)')
    parser.add_argument('--max-latency-ms', type=float, default=50.0,
                        help='largest acceptable dashboard round trip (ms)')
    parser.add_argument('--require-rt', action='store_true',
                        help='fail when real-time scheduling is not available')
    parser.add_argument('--gripper', choices=GRIPPERS, default='none',
                        help='gripper to check as well: robotiq (2F-85 through the URCap '
                        'socket on cell.gripper_port; read only: activate it on the teach '
                        'pendant)')
    args = parser.parse_args(argv)
    try:
        cfg = load_node_config(args.config, 'env_worker', EnvWorkerConfig)
        # The command line's values pass the checks the worker's parameters pass.
        flags = {'rtde.robot_ip': '--robot-ip', 'rtde.frequency': '--frequency'}
        given = {'rtde.robot_ip': args.robot_ip, 'rtde.frequency': args.frequency}
        try:
            cfg = cfg.replace(**{k: v for k, v in given.items() if v is not None})
        except ConfigError as exc:
            if exc.key not in flags:
                raise
            raise ConfigError(flags[exc.key], exc.value, exc.allowed) from None
        if not (math.isfinite(args.max_latency_ms) and args.max_latency_ms > 0):
            raise ConfigError('--max-latency-ms', args.max_latency_ms, '> 0')
    except ConfigError as exc:
        print(f'async-rl-preflight: {exc}', file=sys.stderr)
        return 2
    checks = run_checks(cfg.rtde.robot_ip, cfg.rtde.frequency, args.max_latency_ms,
                        require_rt=args.require_rt, gripper=args.gripper,
                        gripper_port=cfg.cell.gripper_port)
    print(format_table(args.robot_ip, checks), flush=True)
    return 1 if any(c.status == FAIL for c in checks) else 0


def _entry() -> None:
    sys.exit(main())


if __name__ == '__main__':
    _entry()
