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

"""The Robotiq 2F-85 client against the gripper of the controller double (no robot, no ROS)."""

import socket
import threading
import time

from async_rl_ros.envs.robotiq import (check_gripper, CLOSED_COUNT, count_to_width,
                                       force_to_byte, GripperFault, GripperLinkError,
                                       parse_answer, RobotiqGripper, speed_to_byte,
                                       width_to_count)
import pytest
from ur_double.harness import DoubleProcess, free_address

COUNT_M = 0.085 / CLOSED_COUNT   # one position count in metres


@pytest.fixture(scope='module')
def double():
    """One controller double for the module; each test power-cycles its gripper."""
    proc = DoubleProcess()
    yield proc
    proc.close()


@pytest.fixture
def urcap(double):
    """Power-cycle the double's gripper and yield a client connected to it."""
    double.call('gripper_power_cycle')
    gripper = RobotiqGripper(double.ip, timeout_s=10.0)
    gripper.connect()
    yield gripper
    gripper.close()


def settle(gripper, limit_s=30.0):
    """Poll until the fingers stop (OBJ not 0); the limit only turns a hang into a failure."""
    give_up = time.monotonic() + limit_s
    while (state := gripper.state()).obj == 0:
        assert time.monotonic() < give_up, f'the fingers never stopped: {state}'
        time.sleep(0.01)
    return state


def test_activation_resets_then_waits_for_sta_3(double, urcap):
    state = urcap.state()
    assert (state.status, state.active) == (0, False)
    assert urcap.activate() is True
    state = urcap.state()
    assert state.active and state.status == 3 and state.fault == 0
    assert state.width_m == pytest.approx(0.085)
    sim = double.call('gripper')
    assert (sim['resets'], sim['activations']) == (1, 1)


def test_open_and_close_without_an_object_reach_the_width(urcap):
    urcap.activate()
    command = urcap.move(0.0, 0.15, 235.0)
    assert (command.position, command.speed, command.force, command.clipped) == \
        (CLOSED_COUNT, 255, 255, ())
    state = settle(urcap)
    assert (state.obj, state.position, state.holding) == (3, CLOSED_COUNT, False)
    assert state.width_m == 0.0
    urcap.move(0.04)
    state = settle(urcap)
    assert state.obj == 3 and state.width_m == pytest.approx(0.04, abs=COUNT_M)
    urcap.move(0.085)
    state = settle(urcap)
    assert (state.obj, state.position, state.width_m) == (3, 0, 0.085)


def test_closing_on_a_50_mm_object_stops_there_and_holds_it(double, urcap):
    urcap.activate()
    double.call('gripper_object_width_m', 0.05)
    urcap.move(0.0, 0.1, 60.0)
    state = settle(urcap)
    assert state.obj == 2 and state.holding
    assert state.width_m == pytest.approx(0.05, abs=COUNT_M)
    assert state.requested == CLOSED_COUNT        # asked to close, stopped on the object
    assert check_gripper(double.ip)[0] == 'WARN'  # preflight: it already holds something
    urcap.move(0.085)
    state = settle(urcap)
    assert (state.obj, state.width_m) == (3, 0.085)


def test_speed_force_and_width_conversions_clip_and_say_so():
    assert speed_to_byte(0.02) == (0, False) and speed_to_byte(0.15) == (255, False)
    assert speed_to_byte(0.046) == (51, False)
    assert speed_to_byte(0.0) == (0, True) and speed_to_byte(1.0) == (255, True)
    assert force_to_byte(20.0) == (0, False) and force_to_byte(235.0) == (255, False)
    assert force_to_byte(106.0) == (102, False)
    assert force_to_byte(5.0) == (0, True) and force_to_byte(400.0) == (255, True)
    assert width_to_count(0.085) == (0, False) and width_to_count(0.0) == (CLOSED_COUNT, False)
    assert width_to_count(0.0, closed_count=230) == (230, False)
    assert width_to_count(0.2) == (0, True) and width_to_count(-0.01) == (CLOSED_COUNT, True)
    assert count_to_width(0) == 0.085 and count_to_width(CLOSED_COUNT) == 0.0
    assert count_to_width(255) == 0.0          # requests past the closed count: still 0 m
    for width in (0.0, 0.013, 0.05, 0.0849, 0.085):
        assert abs(count_to_width(width_to_count(width)[0]) - width) <= COUNT_M / 2
    for bad in (float('nan'), float('inf')):
        with pytest.raises(ValueError, match='finite'):
            speed_to_byte(bad)


def test_a_move_out_of_range_is_clipped_and_reported(double, urcap):
    urcap.activate()
    command = urcap.move(0.2, 1.0, 5.0)
    assert command.clipped == ('width_m', 'speed_mps', 'force_n')
    assert (command.position, command.speed, command.force, command.width_m) == \
        (0, 255, 0, 0.085)
    regs = double.call('gripper')['regs']
    assert (regs['POS'], regs['SPE'], regs['FOR'], regs['GTO']) == (0, 255, 0, 1)


def test_activate_leaves_an_active_gripper_alone(double, urcap):
    urcap.activate()
    double.call('gripper_object_width_m', 0.05)
    urcap.move(0.0)
    held = settle(urcap)
    assert held.holding
    with RobotiqGripper(double.ip, timeout_s=10.0) as second:
        assert second.activate() is False
    assert urcap.state() == held
    sim = double.call('gripper')
    assert (sim['resets'], sim['activations']) == (1, 1)   # those of the first activate()


def test_a_silent_gripper_raises_a_link_error_within_the_client_timeout(double, urcap):
    double.call('gripper_silent', 'true')
    gripper = RobotiqGripper(double.ip, timeout_s=0.3)
    gripper.connect()
    with pytest.raises(GripperLinkError, match=r"asked 'GET STA', no answer within 0.3 s"):
        gripper.state()
    with pytest.raises(GripperLinkError, match='not connected'):
        gripper.get_var('POS')                        # the link is closed after an error
    status, detail = check_gripper(double.ip, timeout_s=0.3)
    assert status == 'FAIL' and 'no answer within 0.3 s' in detail


def test_a_dropped_connection_raises_a_link_error(double, urcap):
    urcap.activate()
    assert double.call('gripper_drop')['dropped'] >= 1
    with pytest.raises(GripperLinkError, match=r"asked 'GET STA', connection lost") as info:
        urcap.state()
    assert '\n' not in str(info.value) and info.value.__cause__ is None
    urcap.connect()                                   # a new connection finds it still active
    assert urcap.state().active


def test_a_fault_raises_gripper_fault_and_is_not_reset_unless_asked(double, urcap):
    urcap.activate()
    double.call('gripper_fault', 14)
    with pytest.raises(GripperFault, match=r'FLT 14 \(0x0E\): overcurrent') as info:
        urcap.state()
    assert info.value.code == 14
    assert urcap.state(check_fault=False).fault == 14
    with pytest.raises(GripperFault):
        urcap.activate()
    assert double.call('gripper')['resets'] == 1
    status, detail = check_gripper(double.ip)
    assert status == 'FAIL' and 'FLT 14' in detail
    assert urcap.activate(reset_fault=True) is True
    assert urcap.state().fault == 0 and double.call('gripper')['resets'] == 2


@pytest.mark.parametrize('request_, answer, value', [
    ('GET POS', 'POS 0', 0), ('GET POS', 'POS 255', 255), ('GET FLT', 'FLT 00', 0),
    ('GET STA', 'STA 3', 3), ('SET POS 10 GTO 1', 'ack', None)])
def test_well_formed_answers_are_read(request_, answer, value):
    assert parse_answer(request_, answer) == value


@pytest.mark.parametrize('request_, answer', [
    ('GET POS', 'POS 256'), ('GET POS', 'PRE 12'), ('GET POS', 'POS'), ('GET POS', 'POS -1'),
    ('GET POS', 'POS 1.5'), ('GET POS', 'POS 12 13'), ('GET POS', 'POS 12\nPOS 13'),
    ('GET POS', 'ack'), ('GET POS', '?'), ('GET POS', ''), ('GET POS', 'pos 12'),
    ('GET STA', 'STA 4'), ('GET ACT', 'ACT 2'), ('GET POS', 'POS 0x1'),
    ('SET GTO 1', 'ACK'), ('SET GTO 1', 'nak'), ('SET GTO 1', '?'), ('SET GTO 1', ''),
    ('SET GTO 1', 'GTO 1')])
def test_malformed_answers_are_refused_in_one_line(request_, answer):
    with pytest.raises(GripperLinkError) as info:
        parse_answer(request_, answer)
    message = str(info.value)
    assert message == info.value.reason and '\n' not in message
    assert message.startswith(f'asked {request_!r}, got {answer!r} (')


@pytest.fixture
def fake_urcap():
    """Serve scripted answers (bytes, one per request line) on a free local port."""
    listener = socket.create_server(('127.0.0.1', 0))
    answers, clients = [], []

    def serve():
        try:
            conn, _ = listener.accept()
            with conn, conn.makefile('rb') as requests:
                for _ in requests:
                    if not answers:
                        return
                    conn.sendall(answers.pop(0))
        except OSError:
            return   # the test is over: listener or connection closed

    threading.Thread(target=serve, daemon=True).start()

    def start(*script):
        answers.extend(script)
        gripper = RobotiqGripper('127.0.0.1', listener.getsockname()[1], timeout_s=10.0)
        gripper.connect()
        clients.append(gripper)
        return gripper

    yield start
    for gripper in clients:
        gripper.close()
    listener.close()


def test_answers_without_a_line_end_are_read(fake_urcap):
    gripper = fake_urcap(b'ack', b'POS 12', b'\r\nSTA 3\r\n')
    gripper.set_vars(POS=12, GTO=1)
    assert gripper.get_var('POS') == 12
    assert gripper.get_var('STA') == 3


def test_garbage_bytes_raise_a_link_error(fake_urcap):
    gripper = fake_urcap(b'\xff\xfeOS 1\n')
    with pytest.raises(GripperLinkError, match=r"asked 'GET POS', got '.+OS 1' \(expected "
                       r"'POS <0\.\.255>'\)"):
        gripper.get_var('POS')


def test_an_answer_too_many_is_caught_at_the_next_request(fake_urcap):
    gripper = fake_urcap(b'POS 12\nPOS 13\n', b'STA 3\n')
    assert gripper.get_var('POS') == 12
    with pytest.raises(GripperLinkError, match=r"asked 'GET STA', got 'POS 13'"):
        gripper.get_var('STA')


def test_check_gripper_is_read_only_and_fails_until_activated(double, urcap):
    status, detail = check_gripper(double.ip)
    assert (status, detail) == ('FAIL', 'not activated (STA 0): activate it on the teach '
                                'pendant (Robotiq toolbar)')
    assert double.call('gripper')['sets'] == 0       # it neither activated nor moved it
    urcap.activate()
    sets = double.call('gripper')['sets']
    assert check_gripper(double.ip) == ('PASS', 'active, 85.0 mm open (POS 0)')
    assert double.call('gripper')['sets'] == sets


def test_check_gripper_fails_when_nothing_listens():
    status, detail = check_gripper(free_address(), timeout_s=2.0)
    assert status == 'FAIL'
    assert 'asked to connect, got Connection refused' in detail
