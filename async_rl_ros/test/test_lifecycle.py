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

"""Stop requests, pipe-safe output, plain progress lines and children that die with parents."""

import io
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

from async_rl_ros.core.learning.doctor import TrainingDiverged
from async_rl_ros.envs.rtde_supervisor import NeedsPerson
from async_rl_ros.local.lifecycle import (check_child_exit, EXIT_FAILED, EXIT_OK, EXIT_SIGINT,
                                          EXIT_SIGTERM, StopRequest, WorkerFailed)
from async_rl_ros.local.output import PipeSafeStream, Progress
import psutil
import pytest

posix = pytest.mark.skipif(sys.platform == 'win32', reason='POSIX signals and pipes')


@posix
def test_sigterm_and_sigint_become_stop_requests_with_their_exit_codes():
    notes = []
    with StopRequest(notify=notes.append) as stop:
        assert not stop() and stop.exit_code() == EXIT_OK and stop.outcome == 'finished'
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.wait(5.0)
        assert stop() and stop.exit_code() == EXIT_SIGTERM and 'SIGTERM' in stop.outcome
        os.kill(os.getpid(), signal.SIGTERM)  # a second SIGTERM does not abort the save
        time.sleep(0.05)
        assert 'still saving' in notes[-1]
    assert signal.getsignal(signal.SIGTERM) is not stop._handle  # handlers restored

    with StopRequest(notify=notes.append) as stop:
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.wait(5.0) and stop.exit_code() == EXIT_SIGINT
        with pytest.raises(KeyboardInterrupt):  # the second Ctrl-C aborts
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1.0)


@pytest.mark.parametrize('failure', [TrainingDiverged('7 consecutive steps skipped'),
                                     NeedsPerson('the arm was halted')])
def test_expected_failures_are_recorded_not_raised(failure):
    stop = StopRequest(notify=lambda _: None)
    seen = []
    with stop.contain(seen.append):
        raise failure
    assert seen == [failure] and stop.failure is failure and stop()
    assert stop.exit_code() == EXIT_FAILED and str(failure) in stop.outcome
    with pytest.raises(ZeroDivisionError), stop.contain():  # a bug still propagates
        1 / 0


@posix
def test_a_ctrl_c_after_a_failure_still_saves_and_only_a_second_one_aborts():
    notes = []
    with StopRequest(notify=notes.append) as stop:
        with stop.contain():
            raise TrainingDiverged('7 consecutive steps skipped')
        os.kill(os.getpid(), signal.SIGINT)  # the run is saving after the failure
        while stop.signum is None:  # the handler runs in this thread, between bytecodes
            time.sleep(0.001)
        assert 'already stopping' in notes[-1] and 'Ctrl-C again aborts' in notes[-1]
        assert stop.exit_code() == EXIT_FAILED and 'diverged' in stop.outcome
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1.0)


@posix
def test_writes_to_a_pipe_whose_reader_is_gone_are_swallowed():
    read_fd, write_fd = os.pipe()
    stream = PipeSafeStream(os.fdopen(write_fd, 'w', buffering=1))
    stream.write('before\n')
    os.close(read_fd)
    for _ in range(3):
        stream.write('x' * 100_000 + '\n')  # more than the pipe buffer: EPIPE
        stream.flush()
    assert stream.broken and not stream.isatty()
    # The descriptor now points at /dev/null: even the raw fd accepts writes.
    assert os.write(stream.fileno(), b'late') == 4
    stream.close()


def test_progress_prints_plain_lines_when_not_on_a_terminal():
    out = io.StringIO()
    bar = Progress(total=1000, initial=100, desc='async', interval_s=0.0, stream=out)
    assert bar.plain
    for _ in range(3):
        bar.update(300)
        bar.set_postfix(success='0.50', lag=2)
    bar.close()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith('async: 400/1000 steps (40%)')
    assert lines[-1].startswith('async: 1000/1000 steps (100%)') and 'success=0.50' in lines[-1]
    assert len(lines) == 4  # three updates and the close
    quiet = io.StringIO()
    Progress(total=10, enabled=False, stream=quiet).update(5)
    assert quiet.getvalue() == ''


CHILD = textwrap.dedent("""
    import os, sys, time
    from async_rl_ros.local import lifecycle
    if sys.argv[1] == 'poll':
        lifecycle._set_pdeathsig = lambda signum: False  # the fallback watchdog alone
    lifecycle.die_with_parent(int(sys.argv[2]), poll_s=0.1)
    print('ready', flush=True)
    time.sleep(600)
""")
PARENT = textwrap.dedent("""
    import subprocess, sys, os, time
    child = subprocess.Popen([sys.executable, '-c', sys.argv[1], sys.argv[2], str(os.getpid())],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == 'ready'
    print(child.pid, flush=True)
    time.sleep(600)
""")


@posix
@pytest.mark.parametrize('mechanism', ['pdeathsig', 'poll'])
def test_a_child_dies_when_its_parent_is_killed(mechanism):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    parent = subprocess.Popen([sys.executable, '-c', PARENT, CHILD, mechanism],
                              stdout=subprocess.PIPE, text=True, env=env)
    child = None
    try:
        child = psutil.Process(int(parent.stdout.readline()))
        assert child.is_running()
        parent.kill()  # SIGKILL: no clean-up code of the parent runs
        parent.wait(timeout=30)
        gone, alive = psutil.wait_procs([child], timeout=30)
        assert not alive, f'child {child.pid} outlived its parent'
    finally:
        if parent.poll() is None:
            parent.kill()
        if child is not None and child.is_running():
            child.kill()


RUNNER_CHILD = textwrap.dedent("""
    import sys
    from async_rl_ros.local import lifecycle
    if sys.argv[1] == 'poll':
        lifecycle._set_pdeathsig = lambda signum: False  # the fallback watchdog alone
    lifecycle.init_child(int(sys.argv[2]))
    try:
        print('ready', flush=True)
        for line in sys.stdin:
            print('pong', flush=True)
    finally:
        print('unwound', flush=True)
""")
QUIET_PARENT = textwrap.dedent("""
    import subprocess, sys, os, time
    child = subprocess.Popen([sys.executable, '-c', sys.argv[1], sys.argv[2], str(os.getpid())])
    print(child.pid, flush=True)
    time.sleep(600)
""")


@posix
@pytest.mark.parametrize('mechanism', ['pdeathsig', 'poll'])
def test_a_runner_child_takes_sigterm_from_its_parent_and_unwinds_when_the_parent_dies(
        mechanism):
    # The child shares the parent's stdin and stdout, so the test talks to it directly.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    parent = subprocess.Popen([sys.executable, '-c', QUIET_PARENT, RUNNER_CHILD, mechanism],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    guard = threading.Timer(120, parent.kill)  # a hang guard, not a figure
    guard.start()
    child = None
    try:
        first = {parent.stdout.readline().strip(), parent.stdout.readline().strip()}
        assert 'ready' in first, first
        child = psutil.Process(int((first - {'ready'}).pop()))
        # `timeout`, systemd and batch schedulers signal every process of a job: while its
        # parent lives, the child leaves stopping to the parent and goes on.
        child.send_signal(signal.SIGTERM)
        parent.stdin.write('ping\n')
        parent.stdin.flush()
        assert parent.stdout.readline().strip() == 'pong'
        # The parent dies: the death signal ends the child through its own clean-up code.
        parent.kill()
        parent.wait()
        assert parent.stdout.readline().strip() == 'unwound'
        gone, alive = psutil.wait_procs([child], timeout=30)
        assert not alive, f'child {child.pid} outlived its parent'
    finally:
        guard.cancel()
        if parent.poll() is None:
            parent.kill()
        if child is not None and child.is_running():
            child.kill()


ENTRY = textwrap.dedent("""
    from async_rl_ros.envs.rtde_supervisor import NeedsPerson
    from async_rl_ros.local.lifecycle import child_entry

    @child_entry('env worker')
    def worker(worker_id):
        raise NeedsPerson('the arm was halted; a person must restart the worker')

    worker(3)
""")


def test_a_child_needing_a_person_says_so_in_one_line_and_is_not_respawned():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.run([sys.executable, '-c', ENTRY], capture_output=True, text=True,
                           env=env, timeout=120)
    assert child.returncode == EXIT_FAILED
    assert child.stderr.strip().splitlines() == [
        'env worker 3: the robot needs a person: the arm was halted; a person must restart '
        'the worker']
    with pytest.raises(WorkerFailed, match='env worker 3'):
        check_child_exit('env worker 3', child.returncode)
    check_child_exit('env worker 3', -9)  # killed: the runner respawns it
    stop = StopRequest(notify=lambda _: None)
    with stop.contain():
        check_child_exit('env worker 3', EXIT_FAILED)
    assert stop.exit_code() == EXIT_FAILED
