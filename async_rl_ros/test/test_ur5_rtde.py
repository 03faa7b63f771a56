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
The ur5 backend (real ur_rtde client) and its safety supervisor against the controller double.

Each test runs its own double on a free loopback address and injects one fault; the
assertions read what the simulated arm did from the double (speed, position, counters).
Every test also checks that the arm never left the safety box or exceeded the speed limits.
Faults of the backend's own making (client crash, stall, power, stops) are in
test_ur5_rtde_faults.py; the run helpers in ur_double/backend.py.
"""

import signal
import threading
import time

from async_rl_ros.core.config import ConfigError
from async_rl_ros.envs.reach_task import OBS_SLICES
from async_rl_ros.envs.rtde_supervisor import PolicyGate
from async_rl_ros.envs.ur5_rtde import NeedsPerson, UR5RTDE
import numpy as np
import pytest

pytest.importorskip('rtde_control', reason='needs ur-rtde==1.6.5 (requirements.txt)')

from ur_double.backend import drive, expected_speed, make_cfg, PUSH  # noqa: E402
from ur_double.harness import DoubleProcess, free_address  # noqa: E402 -- after the skip check


@pytest.mark.parametrize('run', [
    {'series': 'cb3', 'rtde.frequency': 125.0,
     'rtde.control_mode': 'servoj'},
    {'series': 'e'},
], indirect=True)
def test_reset_moves_home_and_steps_follow_the_commands(run):
    obs, info = run.reset()
    home = np.array(run.cfg.task.home_q)
    state = run.double.state()
    np.testing.assert_allclose(obs[OBS_SLICES['q']], state['q'], atol=1e-6)
    assert np.max(np.abs(np.array(state['q']) - home)) <= run.cfg.task.home_noise + 1e-6
    assert state['speed'] == 0.0 and state['watchdog_hz'] == 2.0, state
    # Measure over 15 uninterrupted steps, the speed over the last 10. On a starved machine the
    # double may miss its data deadline: the supervisor then rightly holds a step ('stale')
    # and truncates the episode. The measurement then starts again from home: steps counted
    # on from where the arm had got to could bring it to the safety box, where the filter
    # slows it. Any other interruption is a failure.
    for _attempt in range(5):
        q0 = np.array(run.double.state()['q'])
        clean = 0
        while clean < 15:
            obs, truncated, info = run.step()
            reason = info.get('interrupted')
            assert reason in (None, 'stale controller state') and truncated == bool(reason), info
            if reason:
                break
            clean += 1
            if clean == 5:
                first = run.backend.read()
        if clean == 15:
            break
        run.reset(q=list(home))
    assert clean == 15
    last = run.backend.read()
    # The arm moves at the commanded speed (controller clock: joints over timestamps).
    want = expected_speed(run.cfg, PUSH)
    np.testing.assert_allclose((last.q - first.q) / (last.stamp - first.stamp), want,
                               rtol=0.1, atol=1e-9)
    if run.cfg.rtde.control_mode == 'speedj':
        np.testing.assert_allclose(obs[OBS_SLICES['qd']], want, atol=1e-6)
    moved = np.array(run.double.state()['q']) - q0
    assert moved[0] > 0.5 * want[0] * 15 * run.cfg.task.dt
    np.testing.assert_allclose(moved[1:], 0.0, atol=1e-9)
    # moveJ reset to a given pose: at rest exactly there.
    target = home + np.array([0.1, -0.05, 0.05, 0.0, 0.0, 0.1])
    obs, _ = run.reset(q=target)
    np.testing.assert_allclose(run.double.state()['q'], target, atol=2e-3)
    assert run.double.state()['speed'] == 0.0
    run.assert_safe()
    # A reset whose joint-space path leaves the safety box is refused; the arm stays.
    before = run.double.state()['q']
    with pytest.raises(NeedsPerson, match='outside the safety box'):
        run.env.reset(options={'q': home + np.array([0.0, 1.4, 0.0, 0.0, 0.0, 0.0])})
    np.testing.assert_allclose(run.double.state()['q'], before, atol=1e-9)


@pytest.mark.parametrize('run', [{'task.action': 'cartesian'}], indirect=True)
def test_a_cartesian_action_moves_the_flange_straight_on_the_real_arm_path(run):
    """The default action: a flange velocity, sent as the joint speeds it takes (speedJ)."""
    run.reset(q=list(run.cfg.task.home_q))
    start = run.backend.read()
    clean = 0
    for _ in range(100):
        _, truncated, info = run.step(np.array([0.0, 0.8, 0.0]))  # +y at 0.2 m/s
        reason = info.get('interrupted')
        assert reason in (None, 'stale controller state') and truncated == bool(reason), info
        clean = 0 if reason else clean + 1
        if clean == 15:
            break
    moved = run.backend.read().ee_pos - start.ee_pos
    assert moved[1] > 0.03, moved           # 15 steps at 0.2 m/s x speed_scaling 0.5
    np.testing.assert_allclose(moved[[0, 2]], 0.0, atol=0.1 * moved[1])
    run.assert_safe()


@pytest.mark.parametrize('run', [{}], indirect=True)
def test_protective_stop_truncates_unlocks_and_resumes(run):
    run.reset()
    drive(run, 5)
    assert run.moving()
    run.double.call('protective_stop')
    obs, truncated, info = run.step()
    assert truncated and info['interrupted'] == 'protective stop'
    state = run.double.state()
    assert state['unlocks'] == 1 and state['safety'] == 'NORMAL'
    assert state['runtime_state'] == 2 and state['uploads'] == 2
    np.testing.assert_allclose(obs[OBS_SLICES['q']], state['q'], atol=1e-6)  # fresh state
    # The stop sent on the protective stop is refused, and found in effect already.
    kinds = [kind for _, kind, _ in run.backend.events if kind != 'stale']
    assert kinds == ['protective_stop', 'stop_in_effect', 'unlocked', 'program_restarted']
    assert run.backend.stop_failures == 0 and run.backend.summary()['stops_in_effect'] == 1
    assert run.backend.interruption == 'protective stop'
    assert run.backend.interruptions['protective stop'] == 1
    run.reset()
    drive(run, 5)
    assert run.moving()
    run.assert_safe()


@pytest.mark.parametrize('run', [{'rtde.protective_stop_limit': 1}],
                         indirect=True)
def test_too_many_protective_stops_stop_and_ask_for_a_person(run):
    run.reset()
    run.step()
    run.double.call('protective_stop')
    assert run.step()[2]['interrupted'] == 'protective stop'
    run.step()
    run.double.call('protective_stop')
    with pytest.raises(NeedsPerson, match='2 protective stops within 600 s .* person'):
        run.step()
    state = run.double.wait_for(lambda s: s['speed'] == 0.0)
    assert state['unlocks'] == 1 and state['safety'] == 'PROTECTIVE_STOP'
    assert state['runtime_state'] == 1
    with pytest.raises(NeedsPerson, match='halted'):
        run.step()
    time.sleep(0.1)
    assert run.double.state()['unlocks'] == 1
    run.assert_safe()


@pytest.mark.parametrize('run', [{}], indirect=True)
def test_link_drop_reconnects_and_never_moves_on_the_old_state(run):
    run.reset()
    drive(run, 5)
    assert run.moving()
    uploads = run.double.state()['uploads']
    run.double.call('drop', 0.6)        # longer than the watchdog period
    obs, truncated, info = run.step()
    assert truncated and 'connection' in info['interrupted']
    assert run.backend.interruptions['lost link'] == 1
    state = run.double.state()
    # The watchdog stopped the arm while the link was down; the returned observation is the
    # fresh one after reconnecting (the arm at rest where it stopped), not the old one.
    assert state['watchdog_trips'] == 1 and state['speed'] == 0.0, state
    np.testing.assert_allclose(obs[OBS_SLICES['q']], state['q'], atol=1e-6)
    np.testing.assert_allclose(obs[OBS_SLICES['qd']], 0.0, atol=1e-9)
    assert state['uploads'] == uploads + 1 and state['runtime_state'] == 2
    assert 'reconnected' in [kind for _, kind, _ in run.backend.events]
    run.reset()
    drive(run, 4)
    assert run.moving()
    run.assert_safe()


@pytest.mark.parametrize('run', [{}], indirect=True)
def test_emergency_stop_halts_and_never_recovers(run):
    run.reset()
    for _ in range(5):
        run.step()
    uploads = run.double.state()['uploads']
    run.double.call('estop')
    with pytest.raises(NeedsPerson, match='emergency_stopped.*will not recover'):
        run.step()
    with pytest.raises(NeedsPerson, match='halted'):
        run.step()
    with pytest.raises(NeedsPerson, match='halted'):
        run.env.reset()
    time.sleep(0.2)
    state = run.double.state()
    assert state['speed'] == 0.0 and state['safety'] == 'ROBOT_EMERGENCY_STOP'
    assert state['unlocks'] == 0 and state['uploads'] == uploads  # nothing was attempted
    run.assert_safe()


@pytest.mark.parametrize('run', [{'gate': PolicyGate(2, 60.0)}],
                         indirect=True)
def test_policy_gate_holds_the_arm_still(run):
    gate = run.backend.gate
    gate.heartbeat(learner_version=5)
    gate.policy_loaded(5)
    run.reset()
    drive(run, 5)
    assert run.moving()
    gate.heartbeat(learner_version=9)   # the worker's policy is now 4 versions behind
    result = {}
    stepper = threading.Thread(target=lambda: result.update(out=run.step()))
    stepper.start()
    try:
        held = run.double.wait_for(lambda s: s['speed'] == 0.0, timeout=5.0)
        time.sleep(0.7)                  # longer than the watchdog period: still held
        state = run.double.state()
        assert stepper.is_alive()
        assert state['speed'] == 0.0 and state['watchdog_trips'] == 0
        np.testing.assert_allclose(state['q'], held['q'], atol=1e-12)
    finally:
        gate.policy_loaded(9)
        stepper.join(10.0)
    obs, truncated, info = result['out']
    assert truncated and info['interrupted'].startswith('policy gate: policy is 4 versions')
    assert run.backend.interruptions['policy gate'] == 1
    run.reset()
    drive(run, 1)
    run.assert_safe()


@pytest.mark.parametrize('run', [{'gate': PolicyGate(2, 60.0)}],
                         indirect=True)
def test_interrupt_ends_a_step_held_by_the_gate_and_the_arm_stays_still(run):
    """What a lifecycle deactivate does while the gate holds the arm (the node's _halt)."""
    gate = run.backend.gate
    gate.heartbeat(learner_version=5)
    gate.policy_loaded(5)
    run.reset()
    drive(run, 3)
    gate.heartbeat(learner_version=9)    # closed: 4 versions behind
    errors = []

    def step():
        try:
            run.step()
        except RuntimeError as exc:
            errors.append(str(exc))

    stepper = threading.Thread(target=step)
    stepper.start()
    held = run.double.wait_for(lambda s: s['speed'] == 0.0, timeout=5.0)
    run.backend.interrupt()
    stepper.join(5.0)
    assert not stepper.is_alive() and errors and 'interrupted' in errors[0]
    time.sleep(0.2)
    state = run.double.state()
    assert state['speed'] == 0.0
    np.testing.assert_allclose(state['q'], held['q'], atol=1e-12)
    run.backend.resume()                 # activate again, with a fresh policy
    gate.policy_loaded(9)
    run.reset()
    drive(run, 2)
    assert run.moving()
    run.assert_safe()


@pytest.mark.parametrize('run', [{}], indirect=True)
def test_a_stalled_worker_is_stopped_by_the_watchdog_then_restarts(run):
    run.reset()
    drive(run, 5)
    assert run.moving()
    time.sleep(0.8)                      # the worker stalls (no command, no kick)
    state = run.double.state()
    assert state['watchdog_trips'] == 1 and state['speed'] == 0.0, state
    assert state['runtime_state'] == 1
    obs, truncated, info = run.step()
    assert truncated and 'not running' in info['interrupted']
    assert run.double.state()['runtime_state'] == 2
    run.reset()
    drive(run, 3)
    assert run.moving()
    run.assert_safe()


@pytest.mark.parametrize('run', [{}], indirect=True)
def test_frozen_data_holds_the_arm_and_sends_no_motion(run):
    run.reset()
    for _ in range(3):
        run.step()
    run.double.call('freeze', 0.3, 2 * run.cfg.task.dt)
    reasons = [run.step()[2].get('interrupted') for _ in range(12)]
    assert 'stale controller state' in reasons
    state = run.double.state()
    assert state['motion_writes_frozen'] == 0
    assert 'stale' in [kind for _, kind, _ in run.backend.events]
    run.assert_safe()


@pytest.mark.parametrize('run', [{}], indirect=True)
def test_sigint_and_close_stop_the_arm_then_the_script(run):
    run.reset()
    drive(run, 3)
    assert run.moving()
    # Python's own handler, even where the test runner inherited SIGINT as ignored.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.1, signal.raise_signal, args=(signal.SIGINT,))
    try:
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            for _ in range(100):
                run.step()
    finally:
        timer.join()
        signal.signal(signal.SIGINT, previous)
    state = run.double.wait_for(lambda s: s['speed'] == 0.0)
    assert state['counts'].get('15', 0) >= 1 and state['counts'].get('255', 0) == 1
    assert state['runtime_state'] == 1
    run.reset()                          # the supervisor restarts the script
    drive(run, 1)
    assert run.moving()
    run.env.close()
    state = run.double.wait_for(lambda s: s['speed'] == 0.0)
    assert state['counts']['255'] == 2 and state['runtime_state'] == 1
    run.env.close()                      # twice is fine
    with pytest.raises(RuntimeError, match='closed'):
        run.step()
    run.assert_safe()


def test_wrong_rate_for_a_cb3_and_local_control_are_refused_before_any_motion():
    double = DoubleProcess(series='cb3')
    try:
        with pytest.raises(ConfigError, match=r'rtde.frequency = 500.0 .*125 on a CB3'):
            UR5RTDE(make_cfg(double.ip))                  # default 500 Hz
        assert double.state()['uploads'] == 0
    finally:
        double.close()
    double = DoubleProcess(not_remote=True)
    try:
        with pytest.raises(NeedsPerson, match='Remote Control'):
            UR5RTDE(make_cfg(double.ip))
        assert double.state()['uploads'] == 0
    finally:
        double.close()


def test_a_controller_that_cannot_be_reached_needs_a_person_not_a_respawn():
    """Nothing listens at the address: one line that says what to check, no traceback."""
    ip = free_address()  # a loopback address no double binds
    with pytest.raises(NeedsPerson, match=rf'^cannot connect to the UR controller at {ip} '
                       r'\(.+\): check rtde.robot_ip'):
        UR5RTDE(make_cfg(ip))
