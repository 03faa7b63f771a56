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
The ur5 backend's control loop against the controller double: stops, script, snapshot, budget.

A stop already in effect (a safety stop that keeps the program, a program the watchdog
ended) is no refusal; a control script that does not start is a supervisor outcome (a fresh
connection, or a person with the reason), never a raw error; every sample is one packet; every
step is timed. No assertion depends on how fast the machine is.
"""

from async_rl_ros.core.learning.networks import PolicyForExport
from async_rl_ros.core.workers.inference import FittedPolicy
from async_rl_ros.envs.ur5_kinematics import fk
from async_rl_ros.envs.ur5_rtde import NeedsPerson
import numpy as np
import pytest
import torch
import transforms3d

pytest.importorskip('rtde_control', reason='needs ur-rtde==1.6.5 (requirements.txt)')

from ur_double.backend import drive  # noqa: E402 -- after the skip check


def _kinds(run):
    return [kind for _, kind, _ in run.backend.events]


@pytest.mark.parametrize('run', [{}], indirect=True)
def test_a_protective_stop_that_keeps_the_program_running_is_a_stop_in_effect(run):
    run.reset()
    drive(run, 3)
    run.double.call('protective_stop', 'keep')
    run.double.wait_for(lambda s: s['safety'] == 'PROTECTIVE_STOP' and s['speed'] == 0.0)
    assert run.double.state()['runtime_state'] == 2   # the program still runs
    run.backend.stop()    # speedStop answers false: the controller holds the arm already
    assert not run.backend.halted and run.backend.stop_failures == 0
    assert 'protective_stopped' in run.backend.events_of('stop_in_effect')[-1]
    obs, truncated, info = run.step()   # the supervisor unlocks and carries on
    assert truncated and info['interrupted'] == 'protective stop'
    drive(run, 3)
    assert run.moving()
    run.assert_safe()


@pytest.mark.parametrize('run', [{}], indirect=True)
def test_a_program_the_watchdog_ended_is_a_stop_in_effect(run):
    run.reset()
    drive(run, 3)
    # The worker stalls: the controller's watchdog (2 Hz here) ends the program.
    run.double.wait_for(lambda s: s['watchdog_trips'] == 1 and s['speed'] == 0.0)
    run.backend.stop()
    assert not run.backend.halted and run.backend.stop_failures == 0
    assert 'not running' in run.backend.events_of('stop_in_effect')[-1]
    obs, truncated, info = run.step()
    assert truncated and 'not running' in info['interrupted']
    drive(run, 3)
    assert run.moving()
    run.assert_safe()


@pytest.mark.parametrize('run', [{}], indirect=True)
def test_a_control_script_that_does_not_start_again_is_reconnected(run):
    run.reset()
    drive(run, 3)
    run.double.call('refuse_script', 1)
    run.double.wait_for(lambda s: s['watchdog_trips'] == 1)   # the program ends
    obs, truncated, info = run.step()   # re-upload refused: a fresh connection uploads anew
    assert truncated and 'not running' in info['interrupted']
    assert 'did not start' in ' '.join(run.backend.events_of('recovery_failed'))
    assert 'reconnected' in _kinds(run)
    drive(run, 3)
    assert run.moving()
    run.assert_safe()


@pytest.mark.parametrize('run', [{'rtde.reconnect_attempts': 1}], indirect=True)
def test_a_control_script_that_never_starts_needs_a_person_with_the_reason(run):
    run.reset()
    drive(run, 2)
    run.double.call('refuse_script', 100)
    run.double.wait_for(lambda s: s['watchdog_trips'] == 1)
    with pytest.raises(NeedsPerson, match='control script does not start.*teach pendant'):
        run.step()
    assert run.double.state()['speed'] == 0.0
    run.assert_safe()


@pytest.mark.parametrize('run', [{'rtde.speed_scaling': 1.0}], indirect=True)
def test_joints_and_pose_come_from_one_packet_and_every_step_is_timed(run):
    run.reset()
    policy = FittedPolicy(torch.jit.script(PolicyForExport(21, 6, (32, 32))), 21, threads=None)
    obs = run.observations[-1]
    worst = 0.0
    for _ in range(12):
        run.env.step(np.full(6, 0.8) * np.sign(policy(obs) + 1e-9))
        for _ in range(20):   # samples while the arm moves, between two steps
            sample = run.backend.link.request('state')
            q, pose = np.array(sample[3]), np.array(sample[5])
            t = fk(q)
            rot = transforms3d.axangles.axangle2mat(pose[3:], np.linalg.norm(pose[3:]))
            worst = max(worst, float(np.max(np.abs(t[:3, 3] - pose[:3]))),
                        float(np.max(np.abs(t[:3, :3] - rot))))
    assert worst < 1e-9, worst
    summary = run.backend.summary()
    assert summary['step_ms']['n'] >= 10 and summary['phase_ms']['policy']['n'] >= 10
    assert set(summary['phase_ms']) == {'observation', 'policy', 'filter', 'command'}
    assert summary['first_action_ms'] is not None and summary['deadline_ms'] == 40.0
    assert isinstance(summary['deadline_misses'], dict)
    assert summary['realtime']['client_priority'] >= 0
