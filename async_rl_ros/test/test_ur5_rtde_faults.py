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
Faults of the ur5 backend's own making, against the controller double (issue 12).

A link stall that crashes ur_rtde, a native crash of the client, the client outliving the
worker, an arm that is not powered on, a stop the controller never confirms.
"""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

from async_rl_ros.envs.reach_task import OBS_SLICES
from async_rl_ros.envs.ur5_rtde import NeedsPerson, UR5RTDE
import numpy as np
import pytest

pytest.importorskip('rtde_control', reason='needs ur-rtde==1.6.5 (requirements.txt)')

from ur_double.backend import drive, make_cfg  # noqa: E402 -- after the skip check
from ur_double.harness import DoubleProcess  # noqa: E402


def _gone(pid):
    """Whether process ``pid`` has ended (a zombie counts: it runs no more code)."""
    try:
        with open(f'/proc/{pid}/stat') as f:
            return f.read().rsplit(')', 1)[1].split()[0] in 'ZX'
    except FileNotFoundError:
        return True


@pytest.mark.parametrize('run', [{}], indirect=True)
def test_a_3_s_link_stall_is_survived_the_arm_stops_and_the_backend_reconnects(run):
    """
    Issue 12 item 4: ur_rtde 1.6.5 segfaults in its own reconnect loop after a 3 s stall.

    The client runs in a child process: the worker (this process) survives, the controller's
    watchdog stops the arm during the stall, a fresh client reconnects and the arm steps again.
    """
    run.reset()
    drive(run, 5)
    assert run.moving()
    old = run.backend.link
    stall = 3.0
    results = []

    def step_until_interrupted():
        for _ in range(200):
            results.append(run.step())
            if results[-1][1]:
                return

    stepper = threading.Thread(target=step_until_interrupted)
    run.double.call('stall', stall)
    start = time.monotonic()
    stepper.start()
    state = run.double.wait_for(lambda s: s['speed'] == 0.0, timeout=stall)
    assert time.monotonic() - start < stall          # stopped during the stall
    assert state['watchdog_trips'] == 1, state
    stepper.join(60.0)
    assert not stepper.is_alive()
    obs, truncated, info = results[-1]
    assert truncated and info['interrupted']
    assert len(results) < 10                         # noticed within a few steps
    assert run.backend.interruption in ('stale data', 'lost link')
    assert sum(run.backend.interruptions.values()) >= 1
    assert 'reconnected' in [kind for _, kind, _ in run.backend.events]
    assert run.backend.link is not old and old.proc.poll() is not None
    state = run.double.state()
    np.testing.assert_allclose(obs[OBS_SLICES['q']], state['q'], atol=1e-6)  # the fresh state
    assert state['runtime_state'] == 2 and state['watchdog_hz'] == 2.0
    run.reset()
    drive(run, 4)
    assert run.moving()
    run.assert_safe()


@pytest.mark.parametrize('run', [{}], indirect=True)
def test_a_crash_of_the_client_reads_as_a_lost_link(run):
    """A native fault (SIGSEGV) of ur_rtde ends its process only; the backend reconnects."""
    run.reset()
    drive(run, 3)
    old = run.backend.link
    os.kill(old.pid, signal.SIGSEGV)
    obs, truncated, info = run.step()
    assert truncated and run.backend.interruption == 'lost link'
    assert 'SIGSEGV' in info['interrupted'] or any(
        'SIGSEGV' in detail for _, kind, detail in run.backend.events if kind == 'client_lost')
    assert run.backend.link is not old and run.backend.link.alive()
    summary = run.backend.summary()
    assert summary['interruptions']['lost link'] == 1 and summary['client_losses'] == 1
    assert summary['reconnects'] == 1 and summary['stop_failures'] == 0
    run.double.wait_for(lambda s: s['speed'] == 0.0 and s['runtime_state'] == 2)
    run.reset()
    drive(run, 3)
    assert run.moving()
    run.assert_safe()


def test_the_client_process_dies_with_the_worker_and_survives_its_starting_thread():
    double = DoubleProcess()
    try:
        code = textwrap.dedent(f"""
            import threading, time
            from async_rl_ros.core.config import EnvWorkerConfig
            from async_rl_ros.envs.ur5_rtde import UR5RTDE
            cfg = EnvWorkerConfig().replace(**{{'backend': 'ur5', 'rtde.robot_ip': {double.ip!r},
                                               'rtde.watchdog_min_hz': 2.0}})
            made = []
            thread = threading.Thread(target=lambda: made.append(UR5RTDE(cfg)))
            thread.start()
            thread.join()              # the thread that started the client has ended
            time.sleep(0.5)
            backend = made[0]
            assert backend.link.alive(), 'the client died with its starting thread'
            backend.reset(backend.read().q)
            print(backend.link.pid, flush=True)
            time.sleep(120)
        """)
        worker = subprocess.Popen([sys.executable, '-c', code], stdout=subprocess.PIPE,
                                  text=True, env=dict(os.environ))
        try:
            line = worker.stdout.readline()
            assert line.strip().isdigit(), (line, worker.wait(10.0))
            child = int(line)
            assert not _gone(child)
        finally:
            worker.kill()              # SIGKILL: no clean-up of its own runs
            worker.wait()
        deadline = time.monotonic() + 5.0
        while not _gone(child):
            assert time.monotonic() < deadline, 'the client process outlived the worker'
            time.sleep(0.05)
    finally:
        double.close()


@pytest.mark.parametrize('run', [{}], indirect=True)
def test_an_arm_that_is_not_powered_on_is_refused_with_a_clear_reason(run):
    run.reset()
    drive(run, 3)
    run.double.call('power_off')
    with pytest.raises(NeedsPerson, match='robot mode POWER_OFF, not RUNNING.*power the arm on'):
        run.step()
    state = run.double.wait_for(lambda s: s['speed'] == 0.0)
    uploads = state['uploads']
    with pytest.raises(NeedsPerson, match='halted'):
        run.step()
    assert run.double.state()['uploads'] == uploads     # nothing was attempted
    run.assert_safe()
    # A controller that is powered off from the start: refused before anything runs.
    double = DoubleProcess()
    try:
        double.call('power_off')
        with pytest.raises(NeedsPerson, match='robot mode POWER_OFF.*nothing was moved'):
            UR5RTDE(make_cfg(double.ip))
        assert double.state()['uploads'] == 0
    finally:
        double.close()


@pytest.mark.parametrize('run', [{'rtde.client_timeout_s': 0.5, 'rtde.watchdog_min_hz': 1.0}],
                         indirect=True)
def test_a_stop_the_controller_never_confirms_is_reported_and_needs_a_person(run):
    """
    Ctrl-C while the controller ignores speedStop/stopScript: NeedsPerson, never silence.

    The client gives up on the stop (0.5 s) before the watchdog (1 s) ends the program (which
    would confirm the stop); it is killed, and the watchdog then stops the arm.
    """
    run.reset()
    drive(run, 3)
    assert run.moving()
    run.double.call('ignore_stops')
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.1, signal.raise_signal, args=(signal.SIGINT,))
    try:
        timer.start()
        with pytest.raises(NeedsPerson, match='KeyboardInterrupt.*could not be confirmed') as err:
            for _ in range(100):
                run.step()
    finally:
        timer.join()
        signal.signal(signal.SIGINT, previous)
    assert isinstance(err.value.__cause__, KeyboardInterrupt)
    assert run.backend.stop_failures >= 1
    assert 'stop_failed' in [kind for _, kind, _ in run.backend.events]
    # The client was killed: the controller's watchdog stops the arm.
    state = run.double.wait_for(lambda s: s['speed'] == 0.0, timeout=5.0)
    assert state['watchdog_trips'] == 1
    with pytest.raises(NeedsPerson, match='halted'):
        run.step()
    run.assert_safe()
