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

"""The unmodified ur_rtde 1.6.5 client against the controller double (no robot, no ROS)."""

import time

from async_rl_ros.envs.arm import rotvec_to_quat
from async_rl_ros.envs.ur5_kinematics import fk
import numpy as np
import pytest
import transforms3d

rtde_control = pytest.importorskip('rtde_control', reason='needs ur-rtde==1.6.5 '
                                   '(requirements.txt)')
rtde_receive = pytest.importorskip('rtde_receive', reason='needs ur-rtde==1.6.5')
dashboard_client = pytest.importorskip('dashboard_client', reason='needs ur-rtde==1.6.5')

from ur_double.harness import _binds, DoubleProcess  # noqa: E402 -- after the skip checks

HOME = [0.0, -1.5708, 1.5708, -1.5708, -1.5708, 0.0]


@pytest.fixture
def double(request):
    """Start a double with the parameters of ``request.param`` (ip, series, ...)."""
    proc = DoubleProcess(**request.param)
    yield proc
    proc.close()


def _timestamps(receive, seconds):
    stamps = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        stamp = receive.getTimestamp()
        if not stamps or stamp != stamps[-1]:
            stamps.append(stamp)
        time.sleep(0.0002)
    return np.array(stamps)


@pytest.mark.parametrize('double, major, hz', [
    ({'series': 'cb3'}, 3, 125.0),
    ({'series': 'e'}, 5, 500.0),
], indirect=['double'])
def test_connect_and_read_state(double, major, hz):
    dash = dashboard_client.DashboardClient(double.ip)
    dash.connect()
    assert dash.polyscopeVersion().startswith(f'{major}.')
    assert 'NORMAL' in dash.safetystatus()
    receive = rtde_receive.RTDEReceiveInterface(double.ip, hz)
    try:
        q = receive.getActualQ()
        np.testing.assert_allclose(q, double.state()['q'], atol=1e-9)
        pose = receive.getActualTCPPose()
        t = fk(np.array(q))
        np.testing.assert_allclose(pose[:3], t[:3, 3], atol=1e-9)
        quat = transforms3d.quaternions.mat2quat(t[:3, :3])
        assert abs(abs(float(np.dot(rotvec_to_quat(pose[3:]), quat))) - 1.0) < 1e-9
        assert receive.getRobotMode() == 7 and receive.getSafetyMode() == 1
        assert not receive.isProtectiveStopped() and not receive.isEmergencyStopped()
        # Data packages come at the controller rate: most are one period apart.
        deltas = np.diff(_timestamps(receive, 0.3))
        assert deltas.size >= 5
        assert np.median(deltas) == pytest.approx(1.0 / hz, rel=1e-6)
    finally:
        receive.disconnect()
        dash.disconnect()


@pytest.mark.parametrize('double', [{}], indirect=True)
def test_speedj_servoj_movej_move_the_joints_as_commanded(double):
    receive = rtde_receive.RTDEReceiveInterface(double.ip)
    control = rtde_control.RTDEControlInterface(double.ip)
    try:
        assert control.isProgramRunning()
        q0 = np.array(receive.getActualQ())
        # speedJ: joint 0 at 0.4 rad/s, acceleration 4 rad/s^2, for 0.5 s of controller time.
        start, give_up = receive.getTimestamp(), time.monotonic() + 20.0
        while receive.getTimestamp() - start < 0.5:
            assert time.monotonic() < give_up, 'no controller data'
            t0 = control.initPeriod()
            assert control.speedJ([0.4, 0, 0, 0, 0, -0.2], 4.0, 0.002)
            control.waitPeriod(t0)
        qd = np.array(receive.getActualQd())
        np.testing.assert_allclose(qd, [0.4, 0, 0, 0, 0, -0.2], atol=1e-9)
        assert control.speedStop(10.0)
        double.wait_for(lambda s: s['speed'] == 0.0)
        moved = np.array(double.state()['q']) - q0
        # 0.5 s at 0.4 rad/s minus the ramps (0.1 s up, 0.04 s down): 0.17-0.21 rad.
        assert 0.15 < moved[0] < 0.23
        assert moved[5] == pytest.approx(-moved[0] / 2, rel=0.05)
        np.testing.assert_allclose(moved[1:5], 0.0, atol=1e-12)
        # servoJ: track a target 0.05 rad away on joint 1.
        q1 = np.array(receive.getActualQ())
        target = q1 + np.array([0, 0.05, 0, 0, 0, 0])
        start, give_up = receive.getTimestamp(), time.monotonic() + 20.0
        while receive.getTimestamp() - start < 0.3:
            assert time.monotonic() < give_up, 'no controller data'
            t0 = control.initPeriod()
            assert control.servoJ(list(target), 0.0, 0.0, 0.002, 0.1, 300.0)
            control.waitPeriod(t0)
        assert control.servoStop(10.0)
        np.testing.assert_allclose(double.state()['q'], target, atol=1e-3)
        # moveJ (blocking) to home, at 1 rad/s.
        double.call('reset_stats')
        assert control.moveJ(HOME, 1.0, 2.0)
        state = double.state()
        np.testing.assert_allclose(state['q'], HOME, atol=1e-9)
        assert state['speed'] == 0.0
        assert state['max_speed'] <= 1.0 + 1e-9
        assert {'9', '11', '15', '16', '1'} <= set(state['counts'])
    finally:
        control.stopScript()
        control.disconnect()
        receive.disconnect()


@pytest.mark.parametrize('double', [{}], indirect=True)
def test_watchdog_halts_motion_when_the_kicks_stop(double):
    receive = rtde_receive.RTDEReceiveInterface(double.ip)
    control = rtde_control.RTDEControlInterface(double.ip)
    try:
        # 2 Hz: writes more than 0.5 s apart stop the program (generous for a busy CI host).
        assert control.setWatchdog(2.0)
        give_up = time.monotonic() + 20.0
        while double.state()['speed'] < 0.2:
            assert time.monotonic() < give_up, 'the arm does not move'
            assert control.speedJ([0.3, 0, 0, 0, 0, 0], 5.0, 0.04)
            control.kickWatchdog()
            time.sleep(0.04)
        assert double.state()['watchdog_trips'] == 0
        # The client stalls: no register write for > 1 / 2 Hz; the controller stops the arm.
        state = double.wait_for(lambda s: s['watchdog_trips'] == 1 and s['speed'] == 0.0,
                                timeout=5.0)
        assert state['runtime_state'] == 1
        assert not control.isProgramRunning()
        assert not control.speedJ([0.3, 0, 0, 0, 0, 0], 5.0, 0.04)  # refused: no program
        time.sleep(0.1)
        assert double.state()['speed'] == 0.0
    finally:
        control.disconnect()
        receive.disconnect()


@pytest.mark.parametrize('double', [{'cooldown': 0.3}], indirect=True)
def test_protective_stop_needs_the_cooldown_then_unlocks(double):
    receive = rtde_receive.RTDEReceiveInterface(double.ip)
    control = rtde_control.RTDEControlInterface(double.ip)
    dash = dashboard_client.DashboardClient(double.ip)
    dash.connect()
    try:
        assert control.speedJ([0.3, 0, 0, 0, 0, 0], 5.0, 0.04)
        double.wait_for(lambda s: s['speed'] > 0.2)
        double.call('protective_stop')
        state = double.wait_for(lambda s: s['speed'] == 0.0)
        assert state['safety'] == 'PROTECTIVE_STOP' and state['runtime_state'] == 1
        time.sleep(0.02)
        assert receive.isProtectiveStopped()
        with pytest.raises(RuntimeError, match='until'):
            dash.unlockProtectiveStop()  # before the cool-down: refused
        time.sleep(0.35)
        dash.unlockProtectiveStop()
        dash.closeSafetyPopup()
        double.wait_for(lambda s: s['safety'] == 'NORMAL')
        assert control.reuploadScript()
        double.wait_for(lambda s: s['runtime_state'] == 2)
        time.sleep(0.05)
        assert control.speedJ([0.3, 0, 0, 0, 0, 0], 5.0, 0.04)
        double.wait_for(lambda s: s['speed'] > 0.2)
        # The emergency stop is not unlocked by the dashboard.
        double.call('estop')
        double.wait_for(lambda s: s['speed'] == 0.0)
        time.sleep(0.02)
        assert receive.isEmergencyStopped()
        with pytest.raises(RuntimeError):
            dash.unlockProtectiveStop()
        assert double.state()['safety'] == 'ROBOT_EMERGENCY_STOP'
    finally:
        control.disconnect()
        receive.disconnect()
        dash.disconnect()


def test_each_double_gets_a_free_address_of_its_own():
    first = DoubleProcess()
    try:
        assert first.ip.startswith('127.') and not _binds(first.ip)  # its ports are taken
        second = DoubleProcess()
        try:
            assert second.ip != first.ip
            assert second.state()['runtime_state'] == 1
        finally:
            second.close()
        # An address given explicitly is not replaced: taken, it fails with the reason.
        with pytest.raises(RuntimeError, match=f'the double on {first.ip} did not start'):
            DoubleProcess(first.ip)
    finally:
        first.close()
    assert _binds(first.ip)


@pytest.mark.parametrize('double', [{}], indirect=True)
def test_a_stall_holds_every_answer_and_data_package_until_it_ends(double):
    receive = rtde_receive.RTDEReceiveInterface(double.ip)
    dash = dashboard_client.DashboardClient(double.ip)
    dash.connect()
    try:
        double.call('stall', 0.8)
        start = time.monotonic()
        stamps = _timestamps(receive, 0.3)
        assert stamps.size <= 2                   # at most one package was on its way
        assert dash.polyscopeVersion().startswith('5.')   # answered once the stall ends
        assert time.monotonic() - start >= 0.7
        assert _timestamps(receive, 0.2).size >= 5        # data flows again
        assert receive.isConnected() and dash.isConnected()
    finally:
        receive.disconnect()
        dash.disconnect()


def test_two_cycles_in_one_clock_period_carry_different_timestamps():
    """A late cycle followed at once by a timely one: the stamps tell their packets apart."""
    from ur_double.controller import Controller
    ctrl = Controller()
    ctrl.runtime, ctrl.mode = 2, 'speed'
    ctrl.qd = ctrl.target = np.full(6, 0.5)
    stamps, joints = [], []
    for _ in range(5):   # far quicker than the 2 ms cycle: all in one or two clock periods
        ctrl.tick()
        out = ctrl.outputs()
        stamps.append(out['timestamp'])
        joints.append(out['actual_q'])
    assert all(b > a for a, b in zip(stamps, stamps[1:])), stamps
    assert all(ja != jb for ja, jb in zip(joints, joints[1:]))


def test_cycles_run_late_keep_their_own_slots():
    """A busy machine delays the double, not its controller: late cycles keep their slots."""
    from ur_double.controller import Controller
    ctrl = Controller()
    ctrl.runtime, ctrl.mode = 2, 'speed'
    ctrl.qd = ctrl.target = np.full(6, 0.5)
    period = 1.0 / ctrl.frequency
    time.sleep(30 * period)              # 30 cycles missed: run 20 of them now, back to back
    stamps, joint = [], []
    for k in range(1, 21):
        ctrl.tick(ctrl.t0 + k * period)
        stamps.append(ctrl.outputs()['timestamp'])
        joint.append(ctrl.outputs()['actual_q'][0])
    np.testing.assert_allclose(np.diff(stamps), period, rtol=1e-9)   # one stamp per slot
    np.testing.assert_allclose(np.diff(joint), 0.5 * period, rtol=1e-6)  # moved by one cycle
