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

"""async-rl-preflight against the controller double: a passing and several failing set-ups."""

import re

from async_rl_ros.envs import preflight
from async_rl_ros.envs.robotiq import RobotiqGripper
import pytest

pytest.importorskip('rtde_receive', reason='needs ur-rtde==1.6.5 (requirements.txt)')

from ur_double.harness import DoubleProcess, free_address  # noqa: E402 -- after the skip check


def rows(text):
    """Map check name -> (status, detail) from the printed table."""
    out = {}
    for line in text.splitlines():
        if line.startswith('RESULT:'):
            continue
        for status in (' PASS ', ' WARN ', ' FAIL '):
            if status in line:
                name, detail = line.split(status, 1)
                out[name.strip()] = (status.strip(), detail.strip())
    return out


def test_passes_against_a_healthy_e_series(capsys):
    double = DoubleProcess()
    try:
        code = preflight.main(['--robot-ip', double.ip])
    finally:
        double.close()
    text = capsys.readouterr().out
    table = rows(text)
    assert code == 0, text
    assert set(table) == {'reachability', 'controller version', 'RTDE frequency', 'robot mode',
                          'safety status', 'program state', 'remote control',
                          'round-trip latency', 'real-time scheduling'}
    assert all(status in ('PASS', 'WARN') for status, _ in table.values()), text
    assert table['controller version'] == ('PASS', '5.15.1.0 (e-Series)')
    assert table['RTDE frequency'][1].endswith('500 Hz requested')
    assert table['remote control'][0] == 'PASS'
    assert 'RESULT: PASS' in text
    # The rate is packets counted over controller time, and the count is reported.
    detail = table['RTDE frequency'][1]
    packets, span = re.search(r'\((\d+) packets over ([\d.]+) s of controller time\)',
                              detail).groups()
    rate = float(detail.split(' Hz measured')[0])
    assert int(packets) > 100 and abs(rate - (int(packets) - 1) / float(span)) < 1.0, detail


def test_cb3_needs_125_hz_and_a_stop_or_local_control_fails(capsys):
    double = DoubleProcess(series='cb3')
    try:
        assert preflight.main(['--robot-ip', double.ip]) == 1   # default rtde.frequency 500
        table = rows(capsys.readouterr().out)
        assert table['controller version'][0] == 'FAIL'
        assert 'set rtde.frequency to 125' in table['controller version'][1]
        assert preflight.main(['--robot-ip', double.ip, '--frequency', '125']) == 0
        table = rows(capsys.readouterr().out)
        assert table['remote control'] == ('PASS', 'not needed on a CB3')
        double.call('protective_stop')
        assert preflight.main(['--robot-ip', double.ip, '--frequency', '125']) == 1
        table = rows(capsys.readouterr().out)
        assert table['safety status'][0] == 'FAIL'
        assert table['safety status'][1].startswith('PROTECTIVE_STOP (protective_stopped)')
        double.call('power_off')
        assert preflight.main(['--robot-ip', double.ip, '--frequency', '125']) == 1
        table = rows(capsys.readouterr().out)
        assert table['robot mode'] == ('FAIL', 'POWER_OFF: power on and release the brakes '
                                       'first')
    finally:
        double.close()


def test_local_control_and_slow_answers_fail(capsys):
    double = DoubleProcess(not_remote=True)
    try:
        double.call('slow', 0.08)
        assert preflight.main(['--robot-ip', double.ip, '--max-latency-ms', '40']) == 1
    finally:
        double.close()
    text = capsys.readouterr().out
    table = rows(text)
    assert table['remote control'][0] == 'FAIL'
    assert 'switch the teach pendant to Remote Control' in table['remote control'][1]
    assert table['round-trip latency'][0] == 'FAIL'
    assert table['controller version'][0] == 'PASS'
    assert 'RESULT: FAIL (9 checks, 2 failed' in text


def test_nothing_listening_fails_reachability(capsys):
    assert preflight.main(['--robot-ip', free_address()]) == 1
    table = rows(capsys.readouterr().out)
    assert table['reachability'][0] == 'FAIL'
    assert 'Connection refused' in table['reachability'][1]
    assert table['robot mode'] == ('FAIL', 'skipped: controller not reachable')
    assert 'gripper' not in table
    assert preflight.main(['--robot-ip', free_address(), '--gripper', 'robotiq']) == 1
    table = rows(capsys.readouterr().out)
    assert table['gripper'] == ('FAIL', 'skipped: controller not reachable')


def test_the_gripper_is_checked_only_when_asked_and_never_activated(capsys):
    double = DoubleProcess()
    try:
        assert preflight.main(['--robot-ip', double.ip, '--gripper', 'robotiq']) == 1
        table = rows(capsys.readouterr().out)
        assert table['gripper'] == ('FAIL', 'not activated (STA 0): activate it on the teach '
                                    'pendant (Robotiq toolbar)')
        assert double.call('gripper')['sets'] == 0        # read-only: nothing written to it
        with RobotiqGripper(double.ip, timeout_s=10.0) as gripper:
            assert gripper.activate()
        assert preflight.main(['--robot-ip', double.ip, '--gripper', 'robotiq']) == 0
        table = rows(capsys.readouterr().out)
        assert table['gripper'] == ('PASS', 'active, 85.0 mm open (POS 0)')
    finally:
        double.close()


@pytest.mark.parametrize('argv, line', [
    (['--robot-ip', ''], "--robot-ip = '' is not allowed (an IPv4 or IPv6 address"),
    (['--robot-ip', '999.1.1.1'], "--robot-ip = '999.1.1.1' is not allowed"),
    (['--robot-ip', '127.0.0.1', '--frequency', '-5'],
     '--frequency = -5.0 is not allowed (one of 125.0, 500.0)'),
    (['--robot-ip', '127.0.0.1', '--max-latency-ms', '0'],
     '--max-latency-ms = 0.0 is not allowed (> 0)'),
])
def test_bad_arguments_are_one_line_and_exit_2_before_any_connection(
        argv, line, capsys, monkeypatch):
    monkeypatch.setattr(preflight, 'run_checks', lambda *a, **k: pytest.fail('it connected'))
    assert preflight.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f'async-rl-preflight: {line}') and err.count('\n') == 1
