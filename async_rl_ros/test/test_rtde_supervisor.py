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

"""Rules of the real-robot safety supervisor, without a robot or a network."""

import threading

from async_rl_ros.core.config import ConfigError, EnvWorkerConfig, RTDEConfig
from async_rl_ros.envs.rtde_supervisor import (backoff, classify, INTERRUPTION_KINDS,
                                               NeedsPerson, PolicyGate, ProtectiveStopLog,
                                               SAFETY_BITS, StateClock, Verdict)
import pytest


def bits(*names):
    return sum(1 << SAFETY_BITS[n] for n in names)


@pytest.mark.parametrize('connected, safety, runtime, verdict', [
    (True, bits('normal'), 2, Verdict.RUN),
    (True, bits('reduced'), 2, Verdict.RUN),
    (False, bits('normal'), 2, Verdict.DISCONNECTED),
    (True, bits('protective_stopped'), 1, Verdict.PROTECTIVE_STOP),
    (True, bits('normal'), 1, Verdict.PROGRAM_STOPPED),
    (True, bits('robot_emergency_stopped', 'emergency_stopped'), 1, Verdict.HALT),
    (True, bits('system_emergency_stopped'), 1, Verdict.HALT),
    (True, bits('fault'), 2, Verdict.HALT),
    (True, bits('violation'), 2, Verdict.HALT),
    # An emergency stop wins over a simultaneous protective stop: never auto-recovered.
    (True, bits('protective_stopped', 'emergency_stopped'), 1, Verdict.HALT),
])
def test_classify(connected, safety, runtime, verdict):
    got, why = classify(connected, safety, runtime)
    assert got is verdict
    assert bool(why) == (verdict is not Verdict.RUN)


@pytest.mark.parametrize('mode, name', [(3, 'POWER_OFF'), (5, 'IDLE'), (2, 'BOOTING'),
                                        (6, 'BACKDRIVE'), (-1, 'NO_CONTROLLER'), (42, '42')])
def test_an_arm_not_powered_on_and_released_is_for_a_person(mode, name):
    got, why = classify(True, bits('normal'), 1, mode)
    assert got is Verdict.NOT_POWERED
    assert why.startswith(f'robot mode {name}, not RUNNING')
    assert classify(True, bits('normal'), 2, 7)[0] is Verdict.RUN
    # A lost link or an emergency stop is named as such, whatever the mode says.
    assert classify(False, 0, 0, mode)[0] is Verdict.DISCONNECTED
    assert classify(True, bits('emergency_stopped'), 1, mode)[0] is Verdict.HALT


def test_recovered_verdicts_name_their_interruption_kind():
    kinds = {v.kind for v in (Verdict.PROTECTIVE_STOP, Verdict.PROGRAM_STOPPED,
                              Verdict.DISCONNECTED)}
    assert kinds == {'protective stop', 'program stopped', 'lost link'}
    assert kinds <= set(INTERRUPTION_KINDS)


def test_protective_stops_beyond_the_limit_in_the_window_need_a_person():
    log = ProtectiveStopLog(limit=2, window_s=10.0, cooldown_s=5.0)
    log.record(0.0)
    assert log.cooldown_left(1.0) == 4.0 and log.cooldown_left(6.0) == 0.0
    log.record(4.0)
    log.record(11.0)            # the stop at 0 s left the window: 2 within 10 s
    with pytest.raises(NeedsPerson, match='3 protective stops within 10 s'):
        log.record(12.0)


def test_backoff_doubles_up_to_the_cap():
    assert list(backoff(0.5, 3.0, 5)) == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert list(backoff(1.0, 1.0, 0)) == []


def test_state_clock_ages_samples_even_without_new_ones():
    clock = StateClock()
    assert clock.age(0.0) == float('inf')
    # One sample, however often read, proves nothing: it may be the last of a dead link.
    assert clock.observe(99.998, 5.001) == float('inf')
    assert clock.observe(99.998, 5.002) == float('inf')
    # Controller time 100 s read at local 5.003, then 100.002 read at 5.004 (faster path).
    assert clock.observe(100.0, 5.003) == 0.0
    assert clock.observe(100.002, 5.004) == 0.0
    assert clock.offset == pytest.approx(5.004 - 100.002)
    # The newest sample stops changing: its age grows with local time.
    assert clock.observe(100.002, 5.050) == pytest.approx(0.046)
    assert clock.age(5.104) == pytest.approx(0.1)
    # A restarted controller (time goes back) re-anchors the offset.
    assert clock.observe(1.0, 6.0) == 0.0
    clock.reset()
    assert clock.age(6.0) == float('inf')
    assert clock.observe(1.0, 6.1) == float('inf')       # the pre-reset sample again
    assert clock.observe(1.002, 6.102) == 0.0


def test_policy_gate_lag_crc_heartbeat():
    now = [0.0]
    gate = PolicyGate.from_config(RTDEConfig(max_policy_lag=2, heartbeat_timeout_s=1.0),
                                  clock=lambda: now[0])
    assert gate.reason() is None                      # warm-up: no policy yet, no lag
    gate.heartbeat(learner_version=10)
    assert gate.reason() is None                      # still no policy: random warm-up
    gate.policy_loaded(8)
    assert gate.reason() is None                      # lag 2 <= 2
    gate.heartbeat(learner_version=11)
    assert 'versions behind' in gate.reason()         # lag 3 > 2
    gate.policy_loaded(11)
    assert gate.reason() is None
    gate.crc_failure()
    assert 'CRC' in gate.reason()
    gate.policy_loaded(12)
    assert gate.reason() is None
    now[0] = 1.5
    assert 'heartbeat' in gate.reason()
    gate.heartbeat()
    assert gate.reason() is None


def test_policy_gate_wait_open_wakes_on_a_change():
    gate = PolicyGate(max_policy_lag=0, heartbeat_timeout_s=60.0)
    gate.policy_loaded(1)
    gate.heartbeat(learner_version=3)
    assert gate.wait_open(0.01) is not None
    opener = threading.Timer(0.05, gate.policy_loaded, args=(3,))
    opener.start()
    try:
        assert gate.wait_open(30.0) is None           # woken by the update, not the timeout
    finally:
        opener.join()


def test_rtde_config_rules():
    cfg = EnvWorkerConfig().replace(backend='ur5', **{'rtde.frequency': 125.0})
    assert cfg.rtde.frequency / cfg.task.control_hz == 5
    with pytest.raises(ConfigError, match='a divisor of rtde.frequency = 125 Hz'):
        cfg.replace(**{'task.control_hz': 30.0})
    # The cube tasks' 10 Hz on a CB-series controller: the refusal names the rates that work,
    # written as they are shown, and those pass (12 and 13 periods of 8 ms).
    with pytest.raises(ConfigError, match=r'nearest: 10\.4167 or 9\.61538\)'):
        cfg.replace(**{'task.control_hz': 10.0})
    for hz, periods in ((10.4167, 12), (9.61538, 13), (125.0, 1)):
        shown = cfg.replace(**{'task.control_hz': hz})
        assert round(shown.rtde.frequency / shown.task.control_hz) == periods
        assert shown.controller_periods == periods  # what the arm waits each step out in
    with pytest.raises(ConfigError, match=r'nearest: 125\)'):
        cfg.replace(**{'task.control_hz': 200.0})       # faster than the controller
    EnvWorkerConfig().replace(**{'task.control_hz': 30.0})   # only the real robot cares
    with pytest.raises(ConfigError, match='one of 125.0, 500.0'):
        cfg.replace(**{'rtde.frequency': 250.0})
    with pytest.raises(ConfigError, match='reconnect_initial_s'):
        cfg.replace(**{'rtde.reconnect_initial_s': 10.0, 'rtde.reconnect_max_s': 1.0})
